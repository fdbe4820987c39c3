package updatesim

import "math"

// Prediction is what first principles say a strategy's figures are, from
// the configuration alone. It assumes the fleet saturated (every slot of
// a routable policy busy, as at an offered load above capacity), ignores
// prefix recompute, and takes the work in flight when a pause starts to
// have the residual lives of a renewal process: length-biased, so that a
// long tail shows in the barrier.
type Prediction struct {
	Lost              Lost
	Cycle             float64 // seconds from an update's start to its end
	Fits              bool    // Cycle <= Period
	EpisodesPerSecond float64
	WaitP99           float64 // seconds: the longest stall a turn meets in an update
	MinRoutable       int
	VersionLag        float64
}

// Predict returns the first-principles figures of s on cfg.
//
// With B requests in flight across the fleet (Little: throughput x T x
// mean generation), b = B/N per policy, residual life R and R_max(n) the
// largest of n residuals:
//
//   - pause-all wait loses N R_max(B) - B E[R]/C policy-seconds to the
//     barrier, N L to loading and 2 N lag to the controller;
//   - pause-all abort and keep lose N L + N lag;
//   - rolling wait loses, per policy, R_max(b) - b E[R]/C to its own drain,
//     plus L + 2 lag; over ceil(N/k) waves its cycle is that many times
//     R_max(b) + L + 2 lag;
//   - rolling abort and keep lose N (L + lag) over ceil(N/k) waves of L + lag.
//
// Episodes per second are the baseline's times 1 - lost/(N max(P, cycle)).
func Predict(cfg Config, s Strategy) Prediction {
	n, c := float64(cfg.Policies), float64(cfg.Capacity)
	g := truncMean(cfg)
	env := secs(cfg.EnvMedian) * math.Exp(cfg.EnvSigma*cfg.EnvSigma/2)
	t := float64(cfg.Turns)
	x0 := min(n*c/(t*g), float64(cfg.Envs)/(t*(env+g)))
	busy := x0 * t * g
	per := busy / n
	period := secs(cfg.Period)
	load, lag := secs(cfg.LoadTime), secs(cfg.ControlLag)
	er := residualMean(cfg)
	out := Prediction{EpisodesPerSecond: x0, MinRoutable: cfg.Policies, Fits: true}
	if s.Pause == "" {
		return out
	}
	wait := s.Pause == PauseWait
	var tau float64 // one group's time
	switch {
	case !s.Rolling && wait:
		rmax := residualMax(cfg, busy)
		out.Lost = Lost{Load: n * load, Barrier: max(n*rmax-busy*er/c, 0), Lag: 2 * n * lag}
		out.Cycle = rmax + load + 2*lag
		out.WaitP99 = out.Cycle
		out.MinRoutable = 0
	case !s.Rolling:
		out.Lost = Lost{Load: n * load, Lag: n * lag}
		out.Cycle = load + lag
		out.WaitP99 = out.Cycle
		out.MinRoutable = 0
	case wait:
		rmax := residualMax(cfg, per)
		out.Lost = Lost{Load: n * load, Barrier: n * max(rmax-per*er/c, 0), Lag: 2 * n * lag}
		tau = rmax + load + 2*lag
	default:
		out.Lost = Lost{Load: n * load, Lag: n * lag}
		tau = load + lag
	}
	if s.Rolling {
		waves := math.Ceil(n / float64(cfg.MaxUnavailable))
		out.Cycle = waves * tau
		out.MinRoutable = cfg.Policies - cfg.MaxUnavailable
		// A policy of wave w serves on the old weights for w tau: on
		// average tau (waves-1)/2, plus its own drain.
		stale := tau * (waves - 1) / 2
		if wait {
			stale += er
		}
		out.VersionLag = stale / max(period, out.Cycle)
		if s.Pause == PauseKeep {
			// Every request in flight is frozen once, for L + lag: more
			// than 1% of the turns of the update when B is.
			turns := x0*t*out.Cycle + busy
			if busy > 0.01*turns {
				out.WaitP99 = load + lag
			}
		}
	} else if wait {
		out.VersionLag = er / max(period, out.Cycle)
	}
	out.Fits = out.Cycle <= period
	out.EpisodesPerSecond = x0 * max(1-out.Lost.Total()/(n*max(period, out.Cycle)), 0)
	return out
}

// The generation time X is log-normal (median e^mu, sigma), cut at GenMax.

// truncMean is E[min(X, GenMax)].
func truncMean(cfg Config) float64 { return integralSurvival(cfg, genCap(cfg)) }

func genCap(cfg Config) float64 {
	if cfg.GenMax > 0 {
		return secs(cfg.GenMax)
	}
	return secs(cfg.GenMedian) * math.Exp(10*cfg.GenSigma)
}

// integralSurvival is the integral of P(X > x) from 0 to r:
// r S(r) + e^(mu + sigma^2/2) Phi((ln r - mu - sigma^2) / sigma).
func integralSurvival(cfg Config, r float64) float64 {
	mu, sg := math.Log(secs(cfg.GenMedian)), cfg.GenSigma
	if sg == 0 {
		return min(r, secs(cfg.GenMedian))
	}
	phi := func(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
	surv := 1 - phi((math.Log(r)-mu)/sg)
	return r*surv + math.Exp(mu+sg*sg/2)*phi((math.Log(r)-mu-sg*sg)/sg)
}

// residualCDF is the distribution of the residual life of min(X, GenMax)
// in equilibrium: the integral of its survival up to r over its mean.
func residualCDF(cfg Config, r float64) float64 {
	c := genCap(cfg)
	if r >= c {
		return 1
	}
	return integralSurvival(cfg, r) / integralSurvival(cfg, c)
}

// residualMax is E[max of k residuals] = integral of 1 - F^k, by the
// midpoint rule on 4000 steps; k need not be whole.
func residualMax(cfg Config, k float64) float64 {
	if k <= 0 {
		return 0
	}
	c := genCap(cfg)
	const steps = 4000
	h, sum := c/steps, 0.0
	for i := range steps {
		sum += 1 - math.Pow(residualCDF(cfg, (float64(i)+0.5)*h), k)
	}
	return sum * h
}

// residualMean is E[R].
func residualMean(cfg Config) float64 { return residualMax(cfg, 1) }
