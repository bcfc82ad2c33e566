//go:build plots

// The picture (run.png) is drawn with gonum/plot, which brings fonts, a PDF
// and a LaTeX package into the build: only with -tags plots (as .ci/run
// runs jepsen-lite), so the fast test loop neither downloads nor compiles
// them. picture_off.go stands in without the tag.

package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// Colors of the picture. Outcomes are the usual traffic-light colours;
// fault families get translucent bands so the points stay visible.
var (
	colAllowed = color.RGBA{R: 30, G: 150, B: 60, A: 255}
	colRefused = color.RGBA{R: 60, G: 110, B: 200, A: 255}
	colPeek    = color.RGBA{R: 140, G: 140, B: 140, A: 255}
	colUnknown = color.RGBA{R: 240, G: 150, B: 0, A: 255}
	colFail    = color.RGBA{R: 210, G: 30, B: 30, A: 255}
)

func faultColor(name string) color.Color {
	switch {
	case isPartition(name):
		return color.NRGBA{R: 80, G: 120, B: 255, A: 45}
	case strings.HasPrefix(name, "kill"):
		return color.NRGBA{R: 255, G: 60, B: 60, A: 45}
	case strings.HasPrefix(name, "pause"):
		return color.NRGBA{R: 170, G: 60, B: 220, A: 45}
	case strings.HasPrefix(name, "clock"):
		return color.NRGBA{R: 230, G: 200, B: 0, A: 60}
	case name == nemMembership:
		return color.NRGBA{R: 40, G: 190, B: 120, A: 50}
	case name == nemRaiseLimit:
		return color.NRGBA{R: 255, G: 140, B: 0, A: 45}
	default: // the final quiet phase
		return color.NRGBA{R: 120, G: 120, B: 120, A: 25}
	}
}

// bands shades fault intervals over the whole height of a plot, with the
// fault's name written up the left edge of its band.
type bands struct {
	faults []faultRecord
	labels bool
}

func (b bands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	// Labels read top to bottom from the top edge of their band; rotated
	// by -90 degrees, YBottom puts the glyphs to the right of the point,
	// inside the band.
	sty := p.X.Tick.Label
	sty.Rotation = -math.Pi / 2
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
	sty.Font.Size = vg.Points(8)
	for _, f := range b.faults {
		x0, x1 := trX(f.Start), trX(f.End)
		x0, x1 = max(x0, c.Min.X), min(x1, c.Max.X)
		if x1 <= x0 {
			continue
		}
		c.FillPolygon(faultColor(f.Name), []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		if b.labels {
			label := f.Name
			if len(f.Targets) > 0 && len(f.Targets) <= 2 {
				label += " " + strings.Join(f.Targets, ",")
			}
			c.FillText(sty, vg.Point{X: x0 + vg.Points(1), Y: c.Max.Y - vg.Points(3)}, label)
		}
	}
}

// writePicture draws the run: latency of every op over time (log scale,
// coloured by outcome) above hit outcomes per second, both with the fault
// intervals shaded.
func writePicture(path string, recs []opRecord, faults []faultRecord, finalStart, finalEnd float64, timeout time.Duration, title string) error {
	// The x axis runs a tenth past the end, which keeps the legends (top
	// right) off the data.
	end := finalEnd * 1.1
	shade := append([]faultRecord(nil), faults...)
	shade = append(shade, faultRecord{Name: "final quiet phase", Start: finalStart, End: finalEnd})
	lat, err := latencyPlot(recs, shade, end, timeout, title)
	if err != nil {
		return err
	}
	rate, err := ratePlot(recs, shade, end)
	if err != nil {
		return err
	}
	return savePanels(path, lat, rate)
}

// timePlot is a plot over the run's seconds with the fault bands shaded;
// both panels start from it, so their x axes match.
func timePlot(shade []faultRecord, end float64, labels bool) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = "seconds since start"
	p.X.Min, p.X.Max = 0, end
	p.X.Tick.Marker = secondTicks{}
	p.Add(bands{faults: shade, labels: labels})
	return p
}

// latencyPlot is the top panel: one point per op at its invoke time,
// its latency on a log scale, coloured by outcome.
func latencyPlot(recs []opRecord, shade []faultRecord, end float64, timeout time.Duration, title string) (*plot.Plot, error) {
	lat := timePlot(shade, end, true)
	lat.Title.Text = title
	lat.Y.Label.Text = "latency (ms, log)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// Room above the client timeout, where unknown ops pile up, for the
	// fault labels.
	lat.Y.Min, lat.Y.Max = 0.05, max(4*float64(timeout.Milliseconds()), 100)
	series := []struct {
		name string
		col  color.Color
		keep func(opRecord) bool
	}{
		{"hit allowed", colAllowed, func(r opRecord) bool {
			return r.Kind != checker.KindPeek && r.Outcome == checker.OutcomeOK && r.Allowed
		}},
		{"hit refused (429)", colRefused, func(r opRecord) bool {
			return r.Kind != checker.KindPeek && r.Outcome == checker.OutcomeOK && !r.Allowed
		}},
		{"peek ok", colPeek, func(r opRecord) bool { return r.Kind == checker.KindPeek && r.Outcome == checker.OutcomeOK }},
		{"unknown", colUnknown, func(r opRecord) bool { return r.Outcome == checker.OutcomeUnknown && !r.Resent }},
		{"fail (not applied)", colFail, func(r opRecord) bool { return r.Outcome == outcomeFail }},
	}
	for _, s := range series {
		var pts plotter.XYs
		for _, r := range recs {
			if s.keep(r) {
				ms := max(float64(r.Return-r.Invoke)/1e6, 0.05)
				pts = append(pts, plotter.XY{X: float64(r.Invoke) / 1e9, Y: ms})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", s.name, err)
		}
		sc.GlyphStyle.Color = s.col
		sc.GlyphStyle.Radius = vg.Points(1.1)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		lat.Add(sc)
		lat.Legend.Add(fmt.Sprintf("%s (%d)", s.name, len(pts)), sc)
	}
	lat.Legend.Top = true
	lat.Legend.Left = false
	return lat, nil
}

// hitRates counts hits (not peeks, not synthetic re-sends) per second of
// their return time, by outcome.
type hitRates struct{ ok, unknown, fail []float64 }

func countHitRates(recs []opRecord, buckets int) hitRates {
	rows := hitRates{make([]float64, buckets), make([]float64, buckets), make([]float64, buckets)}
	for _, r := range recs {
		if r.Kind == checker.KindPeek || r.Resent {
			continue
		}
		b := min(int(float64(r.Return)/1e9), buckets-1)
		switch r.Outcome {
		case checker.OutcomeOK:
			rows.ok[b]++
		case outcomeFail:
			rows.fail[b]++
		default:
			rows.unknown[b]++
		}
	}
	return rows
}

// ratePlot is the bottom panel: hit outcomes per second.
func ratePlot(recs []opRecord, shade []faultRecord, end float64) (*plot.Plot, error) {
	rate := timePlot(shade, end, false)
	rate.Y.Label.Text = "hits per second"
	buckets := int(math.Ceil(end)) + 1
	rows := countHitRates(recs, buckets)
	for _, s := range []struct {
		name string
		col  color.Color
		v    []float64
	}{{"definite (200/429)", colAllowed, rows.ok}, {"unknown", colUnknown, rows.unknown}, {"fail (not applied)", colFail, rows.fail}} {
		pts := make(plotter.XYs, buckets)
		for i, v := range s.v {
			pts[i] = plotter.XY{X: float64(i) + 0.5, Y: v}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", s.name, err)
		}
		l.Color = s.col
		l.Width = vg.Points(1.2)
		rate.Add(l)
		rate.Legend.Add(s.name, l)
	}
	rate.Legend.Top = true
	rate.Y.Min = 0
	return rate, nil
}

// savePanels draws top above bottom, their data areas aligned, into a
// PNG at path.
func savePanels(path string, top, bottom *plot.Plot) error {
	const w, h = 16 * vg.Inch, 10 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(100))
	dc := draw.New(img)
	// White background: a transparent PNG is unreadable in dark viewers.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// Align the two data areas, so a fault band covers the same seconds
	// in both panels.
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(14)}
	cs := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(cs[0][0])
	bottom.Draw(cs[1][0])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create picture: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write picture: %w", err)
	}
	return f.Close()
}

// secondTicks puts a labelled tick every 5, 10, 20, ... seconds (about a
// dozen over the run) and unlabelled ones in between.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 20, 30, 60, 120, 300} {
		step = s
		if span/s <= 15 {
			break
		}
	}
	var ticks []plot.Tick
	for t := math.Ceil(lo/step) * step; t <= hi; t += step {
		ticks = append(ticks, plot.Tick{Value: t, Label: fmt.Sprintf("%g", t)})
		if mid := t + step/2; mid < hi && step >= 2 {
			ticks = append(ticks, plot.Tick{Value: mid})
		}
	}
	return ticks
}
