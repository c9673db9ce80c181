// Command ferry-device-simdev is a simulated device plugin for tests; never
// configure it in production. It simulates CUDA GPUs with memfds (see
// package simdev). The host starts it; it is not meant to be run by hand.
package main
