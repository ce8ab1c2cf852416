package console

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/fairrelay/fairrelay"
)

// bucket is one minute of the last hour's settles.
type bucket struct {
	n        int
	p50, p99 time.Duration
}

// charts are the overview's two charts, as inline SVG drawn here (no
// JavaScript), and their totals.
type charts struct {
	Rate, Latency template.HTML
	Total         int
	PerSecond     string
	P50, P99      time.Duration
	Sampled       bool
}

const (
	chartW, chartH = 600.0, 140.0
	minutes        = 60
)

// chartsOf buckets the settles of the hour before now by minute: the
// deliveries per second and the p50 and p99 delivery latency (the
// delivery's duration as the relay reported it). sampled says the read
// stopped at its limit (the oldest minutes then undercount).
func chartsOf(ds []fairrelay.Delivery, now time.Time, sampled bool) charts {
	var bs [minutes][]time.Duration
	var all []time.Duration
	start := now.Add(-time.Hour)
	for _, d := range ds {
		i := int(d.Settled.Sub(start) / time.Minute)
		if i < 0 || i >= minutes {
			continue
		}
		bs[i] = append(bs[i], d.Duration)
		all = append(all, d.Duration)
	}
	var buckets [minutes]bucket
	for i, b := range bs {
		buckets[i] = bucket{n: len(b), p50: quantile(b, 0.50), p99: quantile(b, 0.99)}
	}
	c := charts{Total: len(all), Sampled: sampled, PerSecond: fmt.Sprintf("%.2f", float64(len(all))/3600), P50: quantile(all, 0.5), P99: quantile(all, 0.99)}
	c.Rate = rateChart(buckets)
	c.Latency = latencyChart(buckets)
	return c
}

// quantile is the q-quantile of ds (nearest rank); 0 for none. It sorts ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// svgOpen starts a chart with its axes and its y scale's top label.
func svgOpen(b *strings.Builder, label, top string) {
	fmt.Fprintf(b, `<svg class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`, chartW+60, chartH+30, chartW+60, chartH+30, label)
	fmt.Fprintf(b, `<line x1="50" y1="5" x2="50" y2="%.0f" class="axis"/><line x1="50" y1="%.0f" x2="%.0f" y2="%.0f" class="axis"/>`, chartH+5, chartH+5, chartW+50, chartH+5)
	fmt.Fprintf(b, `<text x="45" y="14" class="tick" text-anchor="end">%s</text><text x="45" y="%.0f" class="tick" text-anchor="end">0</text>`, top, chartH+5)
	fmt.Fprintf(b, `<text x="50" y="%.0f" class="tick">-60 min</text><text x="%.0f" y="%.0f" class="tick" text-anchor="end">now</text>`, chartH+22, chartW+50, chartH+22)
}

func rateChart(bs [minutes]bucket) template.HTML {
	var top float64
	for _, b := range bs {
		top = max(top, float64(b.n)/60)
	}
	var sb strings.Builder
	svgOpen(&sb, "deliveries per second, by minute", fmt.Sprintf("%.2f/s", top))
	if top > 0 {
		w := chartW / minutes
		for i, b := range bs {
			h := float64(b.n) / 60 / top * chartH
			noun := "deliveries"
			if b.n == 1 {
				noun = "delivery"
			}
			fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="bar"><title>%d %s</title></rect>`,
				50+float64(i)*w+0.5, chartH+5-h, w-1, h, b.n, noun)
		}
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) // numbers and fixed text only
}

func latencyChart(bs [minutes]bucket) template.HTML {
	var top time.Duration
	for _, b := range bs {
		top = max(top, b.p99)
	}
	var sb strings.Builder
	svgOpen(&sb, "p50 and p99 delivery latency, by minute", top.String())
	if top > 0 {
		for _, s := range []struct {
			class string
			of    func(bucket) time.Duration
		}{{"p99", func(b bucket) time.Duration { return b.p99 }}, {"p50", func(b bucket) time.Duration { return b.p50 }}} {
			var pts []string
			for i, b := range bs {
				if b.n == 0 {
					continue
				}
				x := 50 + (float64(i)+0.5)*chartW/minutes
				y := chartH + 5 - float64(s.of(b))/float64(top)*chartH
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			fmt.Fprintf(&sb, `<polyline points="%s" class="%s"/>`, strings.Join(pts, " "), s.class)
		}
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) // numbers and fixed text only
}
