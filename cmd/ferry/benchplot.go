package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ferrydev/ferry/config"
)

// parseSizes reads a --sweep list: sizes separated by commas, or "all".
func parseSizes(s string) ([]int64, error) {
	if s == "all" {
		var out []int64
		for n := int64(4 << 10); n <= 64<<20; n *= 4 {
			out = append(out, n)
		}
		return out, nil
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		n, err := config.ParseSize(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return nil, fmt.Errorf("size %q: want a positive size", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// plotSweep draws rows (one per size, as a sweep measured them) into a
// PNG at path: throughput against size above, p50 latency against size
// below, Ferry beside its baseline (sweepPlots).
func plotSweep(path string, rows []benchRow) error {
	if len(rows) < 2 {
		return fmt.Errorf("--plot needs a sweep of two or more sizes (--sweep), got %d", len(rows))
	}
	panels, err := sweepPlots(rows)
	if err != nil {
		return err
	}
	img := vgimg.New(8*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	for i, p := range panels {
		p.Draw(tiles.At(dc, 0, i))
	}
	return writePNG(path, img)
}

// sweepPlots are the two panels of plotSweep: the size axis is
// logarithmic (a sweep doubles or quadruples it), and so is each value
// axis whose values span a decade or more, as throughput and latency do
// from 4 KiB to 64 MiB: on a linear axis the small sizes' points lie
// flat on zero.
func sweepPlots(rows []benchRow) ([]*plot.Plot, error) {
	base := rows[0].Baseline
	title := fmt.Sprintf("ferry bench: %s %s, batch %d, threads %d", rows[0].Transport, rows[0].Op, rows[0].Batch, rows[0].Threads)
	series := func(f func(benchRow) float64) plotter.XYs {
		var xy plotter.XYs
		for _, r := range rows {
			if v := f(r); v > 0 {
				xy = append(xy, plotter.XY{X: float64(r.BlockSize), Y: v})
			}
		}
		return xy
	}
	panel := func(ylabel string, ferry, baseline plotter.XYs) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "request size (bytes)"
		p.Y.Label.Text = ylabel
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, sizeTicks{}
		if spansDecade(ferry, baseline) {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		}
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		for _, s := range []struct {
			name  string
			xy    plotter.XYs
			color color.Color
			shape draw.GlyphDrawer
		}{
			{"Ferry", ferry, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.CircleGlyph{}},
			{"baseline " + base, baseline, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.SquareGlyph{}},
		} {
			if len(s.xy) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(s.xy)
			if err != nil {
				return nil, err
			}
			l.Color, pts.Color, pts.Shape = s.color, s.color, s.shape
			p.Add(l, pts)
			p.Legend.Add(s.name, l, pts)
		}
		return p, nil
	}
	tp, err := panel("throughput (GB/s, 10^9 B/s)", series(func(r benchRow) float64 { return r.Gbps }), series(func(r benchRow) float64 { return r.BaselineGbps }))
	if err != nil {
		return nil, err
	}
	lp, err := panel("p50 latency per batch (µs)", series(func(r benchRow) float64 { return r.P50us }), series(func(r benchRow) float64 { return r.BaselineP50us }))
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{tp, lp}, nil
}

// spansDecade reports whether the values of the series (all positive)
// reach from some v to 10v or more.
func spansDecade(series ...plotter.XYs) bool {
	lo, hi := math.Inf(1), 0.0
	for _, s := range series {
		for _, p := range s {
			lo, hi = min(lo, p.Y), max(hi, p.Y)
		}
	}
	return hi >= 10*lo
}

// sizeTicks marks powers of two on a byte axis with their KiB/MiB names.
type sizeTicks struct{}

func (sizeTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for v := 1.0; v <= max*1.0001; v *= 2 {
		if v < min/1.0001 {
			continue
		}
		out = append(out, plot.Tick{Value: v, Label: sizeLabel(int64(v))})
	}
	if len(out) > 8 { // label every other power of two; the rest are minor ticks
		for i := range out {
			if i%2 == 1 {
				out[i].Label = ""
			}
		}
	}
	return out
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}

func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return f.Close()
}
