//go:build !linux

package cpuprobe

func allowed() ([]int, error) { return nil, ErrUnsupported }

func pin(int) error { return ErrUnsupported }
