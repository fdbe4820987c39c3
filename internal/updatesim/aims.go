package updatesim

import (
	"fmt"
	"strings"
	"time"
)

// Aim is one aim of the comparison, judged on a sweep.
type Aim struct {
	Aim    string
	Met    bool
	Detail string
}

// rolling lists the rolling strategies' names.
func rolling() []string {
	var out []string
	for _, s := range Strategies {
		if s.Rolling {
			out = append(out, s.Name)
		}
	}
	return out
}

// Aims judges a sweep against the aims of the comparison; policies is N.
func Aims(results []PointResult, policies int) []Aim {
	n := float64(policies)
	lost := Aim{Aim: "rolling's lost policy-seconds per update <= 1.1 x N x L", Met: true}
	thr := Aim{Aim: "where the cycle fits, rolling >= 0.95x the best pause-all's episodes/s, routable never below N - k", Met: true}
	wait := Aim{Aim: "env-worker wait p99 during updates <= 0.25x pause-all wait's", Met: true}
	real := Aim{Aim: "at sigma 1.5, P >= 30 s: rolling >= 1.25x pause-all wait's episodes/s at some point where its cycle fits"}
	var lostD, thrD, waitD, realD []string
	for _, name := range rolling() {
		worstLost, bad, fitting, thrBad, waitBad := 0.0, 0, 0, 0, 0
		worstThr, worstWait, bestReal := 10.0, 0.0, 0.0
		for _, pr := range results {
			s, best, pw := pr.Find(name), bestPauseAll(pr), pr.Find("pause-all wait")
			r := s.Lost.Median / (n * pr.Point.LoadTime.Seconds())
			worstLost = max(worstLost, r)
			if r > 1.1 {
				bad++
			}
			if s.Fits {
				fitting++
				t := s.EPS.Median / best.EPS.Median
				worstThr = min(worstThr, t)
				if t < 0.95 || s.MinRoutable < policies-pr.Point.MaxUnavailable {
					thrBad++
				}
			}
			w := s.WaitP99.Median / pw.WaitP99.Median
			worstWait = max(worstWait, w)
			if w > 0.25 {
				waitBad++
			}
			if s.Fits && pr.Point.GenSigma >= 1.5 && pr.Point.Period >= 30*time.Second {
				bestReal = max(bestReal, s.EPS.Median/pw.EPS.Median)
			}
		}
		lost.Met = lost.Met && bad == 0
		lostD = append(lostD, fmt.Sprintf("%s: worst %.2f x N L, over 1.1 at %d of %d points", name, worstLost, bad, len(results)))
		thr.Met = thr.Met && thrBad == 0
		thrD = append(thrD, fmt.Sprintf("%s: fits at %d of %d points; worst %.3fx there, short at %d", name, fitting, len(results), worstThr, thrBad))
		wait.Met = wait.Met && waitBad == 0
		waitD = append(waitD, fmt.Sprintf("%s: worst %.2fx, over 0.25 at %d points", name, worstWait, waitBad))
		real.Met = real.Met || bestReal >= 1.25
		realD = append(realD, fmt.Sprintf("%s: best %.2fx where it fits", name, bestReal))
	}
	lost.Detail, thr.Detail = strings.Join(lostD, "; "), strings.Join(thrD, "; ")
	wait.Detail, real.Detail = strings.Join(waitD, "; "), strings.Join(realD, "; ")
	return []Aim{lost, thr, wait, real}
}
