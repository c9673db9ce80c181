// Package rocm is Ferry's AMD GPU device plugin (plugin "rocm"): sdk.Device
// over the HIP runtime, loaded at run time with dlopen("libamdhip64.so")
// so that the plugin builds and runs where no ROCm is installed (Probe
// then says why it is unavailable). This package is only the binding
// (hip.go: HIP's few types and prototypes declared by hand, called
// through C trampolines); threads, streams, completions and tables are
// devices/internal/gpu's, shared with devices/cuda.
//
// Allocate is hipMalloc exported as a HIP IPC handle
// (hipIpcGetMemHandle); Import opens HIP IPC handles once per allocation
// (hipIpcOpenMemHandle with lazy peer access) and shares the open between
// regions. Peers come from hipDeviceCanAccessPeer; the link is "xgmi"
// when hipExtGetLinkTypeAndHopCount says XGMI, "pcie" otherwise.
//
// Tests run the same code against testdata/fakehip.c, a FAKE HIP runtime
// over host memory that the test builds with gcc.
package rocm
