package updatesim

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Point is one point of a sweep: what varies between points.
type Point struct {
	GenSigma       float64
	Period         time.Duration
	LoadTime       time.Duration
	MaxUnavailable int
}

func (p Point) String() string {
	return fmt.Sprintf("σ=%g P=%s L=%s k=%d", p.GenSigma, p.Period, p.LoadTime, p.MaxUnavailable)
}

// Grid is every combination of the values, sigma varying fastest.
func Grid(sigmas []float64, periods, loads []time.Duration, ks []int) []Point {
	var out []Point
	for _, k := range ks {
		for _, l := range loads {
			for _, p := range periods {
				for _, s := range sigmas {
					out = append(out, Point{GenSigma: s, Period: p, LoadTime: l, MaxUnavailable: k})
				}
			}
		}
	}
	return out
}

// EnvsForLoad is the number of env workers that offers load times the
// fleet's capacity: a worker that never waits asks for g seconds of a slot
// every s + g seconds (g the mean generation, s the mean env step).
func EnvsForLoad(cfg Config, load float64) int {
	g := truncMean(cfg)
	s := secs(cfg.EnvMedian) * math.Exp(cfg.EnvSigma*cfg.EnvSigma/2)
	return int(math.Ceil(load * float64(cfg.Policies*cfg.Capacity) * (s + g) / g))
}

// Spread is the median of some runs with their least and greatest.
type Spread struct{ Median, Min, Max float64 }

func spread(xs []float64) Spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: med, Min: s[0], Max: s[len(s)-1]}
}

// Summary is one strategy at one point over seeds.
type Summary struct {
	Strategy                               string
	EPS, Lost, Load, Barrier, Lag          Spread
	WaitP50, WaitP99, VersionLag, MaxCycle Spread
	MinRoutable                            int  // the least over seeds
	Fits                                   bool // at every seed
	Predicted                              Prediction
	Runs                                   []Result
}

// PointResult is every strategy at one point.
type PointResult struct {
	Point      Point
	Envs       int
	Strategies []Summary
}

// Find returns the summary of a strategy.
func (pr PointResult) Find(name string) *Summary {
	for i := range pr.Strategies {
		if pr.Strategies[i].Strategy == name {
			return &pr.Strategies[i]
		}
	}
	return nil
}

// Sweep runs every strategy at every point with every seed, on
// GOMAXPROCS goroutines; base gives what the points do not vary, and its
// Envs, when 0, is set per point to offer load times capacity.
func Sweep(base Config, load float64, points []Point, seeds []uint64) ([]PointResult, error) {
	out := make([]PointResult, len(points))
	type job struct{ p, s, seed int }
	var jobs []job
	cfgs := make([]Config, len(points))
	for i, pt := range points {
		c := base
		c.GenSigma, c.Period, c.LoadTime, c.MaxUnavailable = pt.GenSigma, pt.Period, pt.LoadTime, pt.MaxUnavailable
		if base.Envs == 0 {
			c.Envs = EnvsForLoad(c, load)
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", pt, err)
		}
		cfgs[i] = c
		out[i] = PointResult{Point: pt, Envs: c.Envs, Strategies: make([]Summary, len(Strategies))}
		for s := range Strategies {
			out[i].Strategies[s] = Summary{Strategy: Strategies[s].Name, Predicted: Predict(c, Strategies[s]), Runs: make([]Result, len(seeds))}
			for k := range seeds {
				jobs = append(jobs, job{i, s, k})
			}
		}
	}
	var wg sync.WaitGroup
	next := make(chan job)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range next {
				c := cfgs[j.p]
				c.Seed = seeds[j.seed]
				r, _ := Run(c, Strategies[j.s]) // validated above
				out[j.p].Strategies[j.s].Runs[j.seed] = r
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	for i := range out {
		for s := range out[i].Strategies {
			summarise(&out[i].Strategies[s])
		}
	}
	return out, nil
}

func summarise(s *Summary) {
	pick := func(f func(Result) float64) Spread {
		xs := make([]float64, len(s.Runs))
		for i, r := range s.Runs {
			xs[i] = f(r)
		}
		return spread(xs)
	}
	s.EPS = pick(func(r Result) float64 { return r.EpisodesPerSecond })
	s.Lost = pick(func(r Result) float64 { return r.LostPerUpdate.Total() })
	s.Load = pick(func(r Result) float64 { return r.LostPerUpdate.Load })
	s.Barrier = pick(func(r Result) float64 { return r.LostPerUpdate.Barrier })
	s.Lag = pick(func(r Result) float64 { return r.LostPerUpdate.Lag })
	s.WaitP50 = pick(func(r Result) float64 { return r.WaitP50 })
	s.WaitP99 = pick(func(r Result) float64 { return r.WaitP99 })
	s.VersionLag = pick(func(r Result) float64 { return r.VersionLag })
	s.MaxCycle = pick(func(r Result) float64 { return r.MaxCycle })
	s.Fits, s.MinRoutable = true, math.MaxInt
	for _, r := range s.Runs {
		s.Fits = s.Fits && r.Fits
		s.MinRoutable = min(s.MinRoutable, r.MinRoutable)
	}
}

func (s Spread) format(f string) string {
	return fmt.Sprintf(f+" ["+f+".."+f+"]", s.Median, s.Min, s.Max)
}

// WriteTable writes the sweep as a Markdown table: a row per point and
// update strategy, measured median [min..max] over seeds, the prediction
// after "≈".
func WriteTable(w io.Writer, results []PointResult) {
	fmt.Fprintln(w, "| point | strategy | episodes/s ≈ predicted | ÷ none | ÷ best pause-all | lost policy-s/update (load + barrier + lag) ≈ predicted | wait p50 / p99 s ≈ p99 predicted | min routable | version lag ≈ predicted | cycle s, fits P |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, pr := range results {
		none, best := pr.Find("none"), bestPauseAll(pr)
		for _, s := range pr.Strategies {
			if s.Strategy == "none" {
				fmt.Fprintf(w, "| %s, E=%d | none | %s ≈ %.1f | 1 | | | | %d | | |\n", pr.Point, pr.Envs, s.EPS.format("%.1f"), s.Predicted.EpisodesPerSecond, s.MinRoutable)
				continue
			}
			// A cycle longer than P spaces the updates out: its rates
			// are not comparable (†).
			fits, mark := "fits", ""
			if !s.Fits {
				fits, mark = "**does not fit**", " †"
			}
			fmt.Fprintf(w, "| %s | %s | %s ≈ %.1f%s | %.3f%s | %.3f%s | %.0f (%.0f + %.0f + %.1f) [%.0f..%.0f] ≈ %.0f | %.2f / %.2f ≈ %.2f | %d | %.3f ≈ %.3f | %.1f ≈ %.1f, %s |\n",
				pr.Point, s.Strategy, s.EPS.format("%.1f"), s.Predicted.EpisodesPerSecond, mark,
				s.EPS.Median/none.EPS.Median, mark, s.EPS.Median/best.EPS.Median, mark,
				s.Lost.Median, s.Load.Median, s.Barrier.Median, s.Lag.Median, s.Lost.Min, s.Lost.Max, s.Predicted.Lost.Total(),
				s.WaitP50.Median, s.WaitP99.Median, s.Predicted.WaitP99, s.MinRoutable,
				s.VersionLag.Median, s.Predicted.VersionLag, s.MaxCycle.Median, s.Predicted.Cycle, fits)
		}
	}
}

// bestPauseAll is the pause-all strategy with the most episodes per second.
func bestPauseAll(pr PointResult) *Summary {
	var best *Summary
	for i, s := range pr.Strategies {
		if strings.HasPrefix(s.Strategy, "pause-all") && (best == nil || s.EPS.Median > best.EPS.Median) {
			best = &pr.Strategies[i]
		}
	}
	return best
}
