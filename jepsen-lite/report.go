package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// availStat is the share of hit ops that got a definite answer.
type availStat struct {
	Share    *float64 `json:"share"` // null when there were no hits
	Definite int      `json:"definite"`
	Total    int      `json:"total"`
}

func (a *availStat) add(definite bool) {
	a.Total++
	if definite {
		a.Definite++
	}
}

func (a *availStat) finish() {
	if a.Total > 0 {
		s := float64(a.Definite) / float64(a.Total)
		a.Share = &s
	}
}

func (a availStat) String() string {
	if a.Share == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *a.Share*100)
}

// availability splits hits by whether a fault was active while they ran.
// An op counts as "during faults" if its [invoke, return] interval overlaps
// any fault's [start, end] (apply to heal), else as "no fault". The quiet
// gaps right after a heal, when the cluster is still recovering, count as
// no-fault on purpose: recovery time is part of what users see.
type availability struct {
	Overall      availStat `json:"overall"`
	NoFault      availStat `json:"noFault"`
	DuringFaults availStat `json:"duringFaults"`
	FinalPhase   availStat `json:"finalPhase"` // hits invoked in the final quiet phase
}

// computeAvailability is pure: ops, fault intervals and the final phase
// (seconds since start) in, shares out. Synthetic re-sent records are not
// client ops and do not count.
func computeAvailability(recs []opRecord, faults []faultRecord, finalStart, finalEnd float64) availability {
	var a availability
	for _, r := range recs {
		if r.Kind == checker.KindPeek || r.Resent {
			continue
		}
		definite := r.Outcome == checker.OutcomeOK
		a.Overall.add(definite)
		inv, ret := float64(r.Invoke)/1e9, float64(r.Return)/1e9
		faulted := false
		for _, f := range faults {
			if inv <= f.End && ret >= f.Start {
				faulted = true
				break
			}
		}
		if faulted {
			a.DuringFaults.add(definite)
		} else {
			a.NoFault.add(definite)
		}
		if inv >= finalStart && inv < finalEnd {
			a.FinalPhase.add(definite)
		}
	}
	for _, s := range []*availStat{&a.Overall, &a.NoFault, &a.DuringFaults, &a.FinalPhase} {
		s.finish()
	}
	return a
}

// counts are the runner's own tallies (the checker's are over what it was
// given, which excludes failed ops).
type counts struct {
	Ops          int            `json:"ops"`   // client ops, synthetic re-sends excluded
	Hits         int            `json:"hits"`  // multi-key checks included
	Multi        int            `json:"multi"` // multi-key checks (POST /v1/check)
	Peeks        int            `json:"peeks"`
	Allowed      int            `json:"allowed"`
	Refused      int            `json:"refused"`
	UnknownHits  int            `json:"unknownHits"`
	FailedHits   int            `json:"failedHits"`
	UnknownPeeks int            `json:"unknownPeeks"`
	FailedPeeks  int            `json:"failedPeeks"`
	Resent       int            `json:"resent"` // extra unknown hits for transport re-sends
	Reasons      map[string]int `json:"reasons"`
}

func countOps(recs []opRecord) counts {
	c := counts{Reasons: map[string]int{}}
	for _, r := range recs {
		if r.Resent {
			c.Resent++
			continue
		}
		c.Ops++
		hit := r.Kind != checker.KindPeek
		if r.Kind == checker.KindMulti {
			c.Multi++
		}
		if hit {
			c.Hits++
		} else {
			c.Peeks++
		}
		switch {
		case r.Outcome == checker.OutcomeOK && hit && r.Allowed:
			c.Allowed++
		case r.Outcome == checker.OutcomeOK && hit:
			c.Refused++
		case r.Outcome == checker.OutcomeOK:
		case r.Outcome == outcomeFail && hit:
			c.FailedHits++
		case r.Outcome == outcomeFail:
			c.FailedPeeks++
		case hit:
			c.UnknownHits++
		default:
			c.UnknownPeeks++
		}
		if r.Outcome != checker.OutcomeOK {
			c.Reasons[string(r.Kind)+" "+string(r.Outcome)+": "+reasonClass(r)]++
		}
	}
	return c
}

// reasonClass buckets an error for the summary.
func reasonClass(r opRecord) string {
	if r.Code != "" {
		return fmt.Sprintf("HTTP %d %s", r.Status, r.Code)
	}
	e := r.Error
	switch {
	case r.Status != 0 && strings.HasPrefix(e, "malformed"):
		return fmt.Sprintf("HTTP %d malformed body", r.Status)
	case r.Status != 0 && !strings.Contains(e, "HTTP"):
		return fmt.Sprintf("HTTP %d, body read failed", r.Status)
	case r.Status != 0:
		return fmt.Sprintf("HTTP %d", r.Status)
	case strings.Contains(e, "connection refused"):
		return "connection refused"
	case strings.Contains(e, "deadline exceeded") || strings.Contains(e, "Timeout"):
		return "timeout"
	case strings.Contains(e, "connection reset"):
		return "connection reset"
	case strings.Contains(e, "EOF"):
		return "connection closed (EOF)"
	case strings.Contains(e, "no route to host"):
		return "no route to host"
	default:
		return "other"
	}
}

// summary is summary.json.
type summary struct {
	Valid            bool                      `json:"valid"`
	Verdict          string                    `json:"verdict"`
	Failures         []string                  `json:"failures"`
	Warnings         []string                  `json:"warnings"`
	Run              runInfo                   `json:"run"`
	Partitions       string                    `json:"partitions"`
	PartitionMethod  string                    `json:"partitionMethod,omitempty"`
	NemesesRequested []string                  `json:"nemesesRequested"`
	NemesesSkipped   map[string]string         `json:"nemesesSkipped,omitempty"`
	Faults           []faultRecord             `json:"faults"`
	Counts           counts                    `json:"counts"`
	Availability     availability              `json:"availability"`
	Policies         map[string]checker.Policy `json:"policies,omitempty"` // every version the checker judged against
	Checker          checkerSummary            `json:"checker"`
	Violations       []checker.Violation       `json:"violations"`
	Convergence      convergence               `json:"convergence"`
	Crashes          []crash                   `json:"crashes"`
	Files            map[string]any            `json:"files"`
}

type checkerSummary struct {
	Valid  bool                `json:"valid"`
	Keys   []checker.KeyResult `json:"keys"`
	Counts any                 `json:"counts"`
}

type runInfo struct {
	Name           string         `json:"name"`
	Mode           string         `json:"mode"` // "netns" or "loopback"
	Out            string         `json:"out"`
	Started        string         `json:"started"`
	WallSeconds    float64        `json:"wallSeconds"`
	Duration       string         `json:"duration"` // faulted phase as run
	DurationNote   string         `json:"durationNote,omitempty"`
	FinalPhase     [2]float64     `json:"finalPhase"` // seconds since start
	Seed           uint64         `json:"seed"`
	Flags          map[string]any `json:"flags"`
	NodeServeFlags []string       `json:"nodeServeFlags"`
	Nodes          []nodeInfo     `json:"nodes"`
}

type nodeInfo struct {
	ID       string `json:"id"`
	HTTP     string `json:"http"`
	Raft     string `json:"raft"`
	NS       string `json:"netns,omitempty"`
	DataDir  string `json:"dataDir"`
	LogFile  string `json:"log"`
	Restarts int    `json:"starts"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeHistory writes one record per line.
func writeHistory(path string, recs []opRecord) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create history: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("write history: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write history: %w", err)
	}
	return f.Close()
}

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

	lat := plot.New()
	lat.Title.Text = title
	lat.Y.Label.Text = "latency (ms, log)"
	lat.X.Label.Text = "seconds since start"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// Room above the client timeout, where unknown ops pile up, for the
	// fault labels.
	lat.Y.Min, lat.Y.Max = 0.05, max(4*float64(timeout.Milliseconds()), 100)
	lat.X.Min, lat.X.Max = 0, end
	lat.X.Tick.Marker = secondTicks{}
	lat.Add(bands{faults: shade, labels: true})
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
			return fmt.Errorf("plot %s: %w", s.name, err)
		}
		sc.GlyphStyle.Color = s.col
		sc.GlyphStyle.Radius = vg.Points(1.1)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		lat.Add(sc)
		lat.Legend.Add(fmt.Sprintf("%s (%d)", s.name, len(pts)), sc)
	}
	lat.Legend.Top = true
	lat.Legend.Left = false

	// Outcomes per second of hits.
	rate := plot.New()
	rate.Y.Label.Text = "hits per second"
	rate.X.Label.Text = "seconds since start"
	rate.X.Min, rate.X.Max = 0, end
	rate.X.Tick.Marker = secondTicks{}
	rate.Add(bands{faults: shade})
	buckets := int(math.Ceil(end)) + 1
	type row struct{ ok, unknown, fail []float64 }
	rows := row{make([]float64, buckets), make([]float64, buckets), make([]float64, buckets)}
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
			return fmt.Errorf("plot %s: %w", s.name, err)
		}
		l.Color = s.col
		l.Width = vg.Points(1.2)
		rate.Add(l)
		rate.Legend.Add(s.name, l)
	}
	rate.Legend.Top = true
	rate.Y.Min = 0

	const w, h = 16 * vg.Inch, 10 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(100))
	dc := draw.New(img)
	// White background: a transparent PNG is unreadable in dark viewers.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// Align lines the two data areas up, so a fault band covers the same
	// seconds in both panels.
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(14)}
	cs := plot.Align([][]*plot.Plot{{lat}, {rate}}, tiles, dc)
	lat.Draw(cs[0][0])
	rate.Draw(cs[1][0])
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
