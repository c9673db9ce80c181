package gpu

import "fmt"

// FormatUUID writes a device UUID as nvidia-smi does:
// "GPU-8f3a1c2e-...".
func FormatUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
