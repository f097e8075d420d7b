package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// chart is a line chart of one or more series against the same x values,
// drawn on a white canvas with axes, ticks, a title and a legend. It is
// deliberately small: the benchmark's figures have three or four points.
type chart struct {
	title, xLabel, yLabel string
	logY                  bool
	series                []series
}

type series struct {
	name   string
	x, y   []float64
	dashed bool // a projection rather than a measurement
	color  color.RGBA
}

// palette gives each series a colour a reader can tell apart.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

const (
	width, height = 720, 440
	left, right   = 80, 20
	top, bottom   = 40, 60
	legendLine    = 16
)

var (
	black = color.RGBA{0, 0, 0, 0xff}
	grey  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	// face is a fixed 7×13 bitmap font of printable ASCII: labels are
	// spelt in ASCII ("us" for microseconds).
	face = basicfont.Face7x13
)

// render draws the chart.
func (c chart) render() (*image.RGBA, error) {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.series {
		if len(s.x) != len(s.y) {
			return nil, fmt.Errorf("series %q: %d x and %d y values", s.name, len(s.x), len(s.y))
		}
		for i := range s.x {
			if c.logY && s.y[i] <= 0 {
				continue
			}
			xmin, xmax = math.Min(xmin, s.x[i]), math.Max(xmax, s.x[i])
			ymin, ymax = math.Min(ymin, s.y[i]), math.Max(ymax, s.y[i])
		}
	}
	if math.IsInf(xmin, 0) {
		return nil, fmt.Errorf("chart %q: no points", c.title)
	}
	xmin = 0
	yTicks := linearTicks(0, ymax)
	if c.logY {
		yTicks = logTicks(ymin, ymax)
	} else {
		ymin = 0
	}
	ymin, ymax = yTicks[0], yTicks[len(yTicks)-1]
	xTicks := linearTicks(xmin, xmax)
	xmax = xTicks[len(xTicks)-1]

	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	px := func(x float64) int { return left + int(math.Round((x-xmin)/(xmax-xmin)*plotW)) }
	py := func(y float64) int {
		f := (y - ymin) / (ymax - ymin)
		if c.logY {
			f = (math.Log10(y) - math.Log10(ymin)) / (math.Log10(ymax) - math.Log10(ymin))
		}
		return top + int(math.Round((1-f)*plotH))
	}

	// Grid, axes, ticks and labels.
	for _, t := range yTicks {
		y := py(t)
		hline(img, left, width-right, y, grey)
		label := formatTick(t)
		text(img, left-8-textWidth(label), y+4, label)
	}
	for _, t := range xTicks {
		x := px(t)
		vline(img, x, top, height-bottom, grey)
		label := formatTick(t)
		text(img, x-textWidth(label)/2, height-bottom+16, label)
	}
	hline(img, left, width-right, height-bottom, black)
	vline(img, left, top, height-bottom, black)
	text(img, (width-textWidth(c.title))/2, 20, c.title)
	text(img, left+(int(plotW)-textWidth(c.xLabel))/2, height-bottom+36, c.xLabel)
	text(img, 8, top-10, c.yLabel)

	// Series, then the legend in the top left corner of the plot.
	for i, s := range c.series {
		col := s.color
		if col.A == 0 {
			col = palette[i%len(palette)]
		}
		var prev image.Point
		first := true
		for j := range s.x {
			if c.logY && s.y[j] <= 0 {
				first = true
				continue
			}
			p := image.Pt(px(s.x[j]), py(s.y[j]))
			if !first {
				line(img, prev, p, col, s.dashed)
			}
			marker(img, p, col)
			prev, first = p, false
		}
		ly := top + 12 + i*legendLine
		line(img, image.Pt(left+12, ly-4), image.Pt(left+36, ly-4), col, s.dashed)
		text(img, left+42, ly, s.name)
	}
	return img, nil
}

// linearTicks are 4-8 round values from 0 (or lo) up to at least hi.
func linearTicks(lo, hi float64) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= 7 {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Floor(lo/step) * step; ; t += step {
		out = append(out, t)
		if t >= hi-1e-9*step {
			return out
		}
	}
}

// logTicks are the powers of ten around lo..hi.
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for e := math.Floor(math.Log10(lo)); ; e++ {
		out = append(out, math.Pow(10, e))
		if math.Pow(10, e) >= hi {
			return out
		}
	}
}

func formatTick(v float64) string {
	switch {
	case v >= 1e6 && math.Mod(v, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3 && math.Mod(v, 1e3) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

func text(img *image.RGBA, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(black), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(s string) int { return font.MeasureString(face, s).Round() }

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// line draws a 2-pixel line from a to b, dashed if asked.
func line(img *image.RGBA, a, b image.Point, c color.RGBA, dashed bool) {
	dx, dy := float64(b.X-a.X), float64(b.Y-a.Y)
	n := int(math.Max(math.Abs(dx), math.Abs(dy)))
	for i := 0; i <= n; i++ {
		if dashed && (i/6)%2 == 1 {
			continue
		}
		f := float64(i) / math.Max(float64(n), 1)
		x, y := a.X+int(math.Round(f*dx)), a.Y+int(math.Round(f*dy))
		img.SetRGBA(x, y, c)
		img.SetRGBA(x, y+1, c)
		img.SetRGBA(x+1, y, c)
	}
}

func marker(img *image.RGBA, p image.Point, c color.RGBA) {
	for dx := -3; dx <= 3; dx++ {
		for dy := -3; dy <= 3; dy++ {
			img.SetRGBA(p.X+dx, p.Y+dy, c)
		}
	}
}
