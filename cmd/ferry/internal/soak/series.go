package soak

import (
	"bufio"
	"fmt"
	"image/color"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// sampleSelf reads this process: open FDs (/proc/self/fd), goroutines and
// RSS (/proc/self/statm).
func sampleSelf(at time.Duration) Sample {
	s := Sample{At: at, Goroutines: runtime.NumGoroutine()}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.FDs = len(ents) - 1 // the directory's own fd
	}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			s.RSS = pages * int64(os.Getpagesize())
		}
	}
	return s
}

// WriteSeries writes the samples as CSV: seconds since the start, FDs,
// goroutines, RSS in bytes, and the faults injected since the previous
// sample (";"-separated kinds).
func WriteSeries(path string, samples []Sample, faults []Fault) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "t_s,fds,goroutines,rss_bytes,faults")
	k := 0
	for _, s := range samples {
		var names []string
		for k < len(faults) && faults[k].At <= s.At {
			names = append(names, faults[k].Kind)
			k++
		}
		fmt.Fprintf(w, "%.1f,%d,%d,%d,%s\n", s.At.Seconds(), s.FDs, s.Goroutines, s.RSS, strings.Join(names, ";"))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WritePlot draws FDs, goroutines and RSS over time, one panel each, with
// a vertical line at every fault, into a PNG at path.
func WritePlot(path, title string, samples []Sample, faults []Fault) error {
	if len(samples) < 2 {
		return fmt.Errorf("plot: %d samples, need two or more", len(samples))
	}
	blue := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	red := color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xb0}
	panels := []struct {
		label string
		value func(Sample) float64
	}{
		{"open FDs", func(s Sample) float64 { return float64(s.FDs) }},
		{"goroutines", func(s Sample) float64 { return float64(s.Goroutines) }},
		{"RSS (MiB)", func(s Sample) float64 { return float64(s.RSS) / (1 << 20) }},
	}
	var plots []*plot.Plot
	for i, pn := range panels {
		p := plot.New()
		if i == 0 {
			p.Title.Text = title
		}
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = pn.label
		p.Add(plotter.NewGrid())
		xy := make(plotter.XYs, len(samples))
		lo, hi := pn.value(samples[0]), pn.value(samples[0])
		for k, s := range samples {
			v := pn.value(s)
			xy[k] = plotter.XY{X: s.At.Seconds(), Y: v}
			lo, hi = min(lo, v), max(hi, v)
		}
		pad := max((hi-lo)*0.1, 1)
		p.Y.Min, p.Y.Max = lo-pad, hi+pad
		for _, f := range faults {
			l, err := plotter.NewLine(plotter.XYs{{X: f.At.Seconds(), Y: lo - pad}, {X: f.At.Seconds(), Y: hi + pad}})
			if err != nil {
				return err
			}
			l.Color, l.Dashes = red, []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(l)
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color, l.Width = blue, vg.Points(1.2)
		p.Add(l)
		plots = append(plots, p)
	}
	img := vgimg.New(9*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	for i, p := range plots {
		p.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
