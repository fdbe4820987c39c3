package updatesim

import (
	"container/heap"
	"slices"
)

// A group is the policies updated together: every policy under pause-all,
// one policy under rolling. It goes through its stages as one.
type group struct {
	idx     int
	members []int
	stage   int // index in the update's stages; -1 before the first
}

// stage is one step of a group's update: a phase, for a time, or (untilDrained)
// until none of the group's policies has work left.
type stage struct {
	phase        int
	dur          float64
	untilDrained bool
}

// stages are the steps of a group's update in the strategy's pause mode:
// with wait, drain, the controller's lag to see it, load, the lag to see
// it loaded; with abort or keep, load and the lag to see it loaded.
func (m *model) stages() []stage {
	lag, load := secs(m.cfg.ControlLag), secs(m.cfg.LoadTime)
	st := []stage{{phase: phaseLoad, dur: load}, {phase: phaseLag, dur: lag}}
	if m.s.Pause == PauseWait {
		st = append([]stage{{phase: phaseBarrier, untilDrained: true}, {phase: phaseLag, dur: lag}}, st...)
	}
	return st
}

func (g *group) drained(m *model) bool {
	for _, i := range g.members {
		if len(m.policies[i].reqs) > 0 {
			return false
		}
	}
	return true
}

// startUpdate publishes the next version and starts the update: every
// policy at once under pause-all, the first MaxUnavailable under rolling.
func (m *model) startUpdate() {
	for _, p := range m.policies {
		m.settlePolicy(p) // tokens so far were made before the new version
	}
	m.newest++
	m.cur = &updateRec{start: m.now}
	m.updates = append(m.updates, m.cur)
	m.groups = m.groups[:0]
	if m.s.Rolling {
		for i := range m.policies {
			m.groups = append(m.groups, &group{idx: i, members: []int{i}, stage: -1})
		}
		for i := range min(m.cfg.MaxUnavailable, len(m.groups)) {
			m.startGroup(m.groups[i])
		}
		return
	}
	all := &group{stage: -1}
	for i := range m.policies {
		all.members = append(all.members, i)
	}
	m.groups = append(m.groups, all)
	m.startGroup(all)
}

// startGroup takes the group's policies out of routing and pauses their
// work in flight in the strategy's mode.
func (m *model) startGroup(g *group) {
	var aborted []*request
	for _, i := range g.members {
		p := m.policies[i]
		m.settlePolicy(p)
		p.routable, p.group = false, g
		switch m.s.Pause {
		case PauseAbort:
			for _, r := range p.reqs {
				// Its generated part joins the prefix, recomputed with
				// the rest wherever it runs next.
				done := r.base - r.gen
				r.prefill += done / r.base * secs(m.cfg.PrefixCost)
				r.policy, r.seq = -1, r.seq+1
				aborted = append(aborted, r)
			}
			p.reqs = p.reqs[:0]
		case PauseKeep:
			for _, r := range p.reqs {
				r.frozen, r.seq = true, r.seq+1
			}
		}
	}
	// The aborted turns are asked again first: they were waiting longest.
	m.queue = append(aborted, m.queue...)
	m.advance(g)
}

// advance moves g into its next stage, and on through the stages that are
// already over (a drain with nothing in flight).
func (m *model) advance(g *group) {
	st := m.stages()
	for {
		if g.stage >= 0 && st[g.stage].phase == phaseLoad {
			for _, i := range g.members {
				p := m.policies[i]
				p.version, p.epoch = m.newest, p.epoch+1 // the new weights flush the cache
			}
		}
		g.stage++
		if g.stage == len(st) {
			m.endGroup(g)
			return
		}
		s := st[g.stage]
		for _, i := range g.members {
			p := m.policies[i]
			m.acct(p)
			p.phase = s.phase
		}
		switch {
		case s.untilDrained && g.drained(m):
			continue
		case s.untilDrained:
			return // finish advances it
		}
		heap.Push(&m.q, event{at: m.now + s.dur, kind: evStep, id: g.idx})
		return
	}
}

// step: the timed stage of the current update's group idx has ended.
func (m *model) step(idx int) { m.advance(m.groups[idx]) }

// endGroup returns the group's policies to routing, resumes their frozen
// work, and starts the next group or ends the update.
func (m *model) endGroup(g *group) {
	for _, i := range g.members {
		p := m.policies[i]
		m.acct(p)
		p.phase, p.routable, p.group = phaseServing, true, nil
		for _, r := range p.reqs {
			if r.frozen {
				r.frozen, r.since = false, m.now
				m.episodes[r.worker].epoch = p.epoch // its KV survived
				m.schedule(r)
			}
		}
	}
	if next := slices.IndexFunc(m.groups, func(x *group) bool { return x.stage < 0 }); next >= 0 {
		m.startGroup(m.groups[next])
		return
	}
	if slices.ContainsFunc(m.groups, func(x *group) bool { return x.stage < len(m.stages()) }) {
		return
	}
	m.cur.end = m.now
	m.cur = nil
	switch {
	case m.late > 0:
		m.late--
		m.startUpdate()
	case len(m.updates) == m.cfg.Updates:
		m.winEnd = max(m.winStart+float64(m.cfg.Updates)*secs(m.cfg.Period), m.now)
	}
}
