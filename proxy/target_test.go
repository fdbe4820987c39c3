package proxy

import (
	"strconv"
	"testing"
)

func TestTargetCache(t *testing.T) {
	p := New(Config{})
	u := p.target("http://10.0.0.1:30000/base")
	if u.Host != "10.0.0.1:30000" || u.Path != "/base" {
		t.Errorf("parsed %+v", u)
	}
	if p.target("http://10.0.0.1:30000/base") != u {
		t.Error("the same URL parsed again")
	}
	for i := range maxTargets + 10 {
		p.target("http://10.0.0.2:" + strconv.Itoa(i))
	}
	n := 0
	p.targets.Range(func(any, any) bool { n++; return true })
	if n > maxTargets || n != int(p.targetCount.Load()) {
		t.Errorf("%d cached, count %d; want at most %d", n, p.targetCount.Load(), maxTargets)
	}
}
