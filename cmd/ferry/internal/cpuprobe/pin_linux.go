package cpuprobe

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpuprobe: sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pin binds the calling thread (locked to its goroutine) to cpu.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("cpuprobe: pin a thread to CPU %d: %w", cpu, err)
	}
	return nil
}
