package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a process the benchmark started: an upstream, nginx or a
// router. It leads its own process group, so that its CPU time is that
// of every process it forked (nginx's workers) and stopping it stops them.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string // its stderr, kept for when it fails
	done chan struct{}
	err  error // set when done is closed
}

// startChild starts cmd in a process group of its own, its output going
// to a file in dir.
func startChild(name, dir string, cmd *exec.Cmd) (*child, error) {
	logPath := dir + "/" + name + ".log"
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// stop sends SIGTERM to the child's process group and waits for it, then
// kills what is left after a few seconds.
func (c *child) stop() {
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.done
	}
}

// failure describes a child that exited, with the end of its log.
func (c *child) failure() error {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Errorf("%s exited (%v); its log ends:\n%s", c.name, c.err, b)
}

// waitHTTP waits until GET url answers 2xx, the child exits, or the
// deadline passes.
func (c *child) waitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode/100 == 2 {
				return nil
			}
		}
		select {
		case <-c.done:
			return c.failure()
		case <-ctx.Done():
			return fmt.Errorf("%s: %s did not answer: %v", c.name, url, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cpu returns the CPU time (user + system) the child's process group has
// used so far.
func (c *child) cpu() (time.Duration, error) { return groupCPU(c.cmd.Process.Pid) }

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on every
// Linux the benchmark runs on).
const clockTicks = 100

// groupCPU sums utime + stime of the processes of process group pgid, as
// /proc/PID/stat has them.
func groupCPU(pgid int) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	found := false
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it exited
		}
		pg, t, err := parseStat(string(b))
		if err != nil {
			return 0, err
		}
		if pg == pgid {
			ticks += t
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("no process in group %d", pgid)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// parseStat returns the process group and utime + stime of a
// /proc/PID/stat line (proc(5): fields 5, 14 and 15; the command, field 2,
// is in parentheses and may hold spaces).
func parseStat(s string) (pgrp int, ticks int64, err error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc stat: no command")
	}
	f := strings.Fields(s[i+1:]) // from field 3, the state
	if len(f) < 13 {
		return 0, 0, errors.New("/proc stat: too few fields")
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, fmt.Errorf("/proc stat: process group: %w", err)
	}
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc stat: times: %w", err)
		}
		ticks += n
	}
	return pgrp, ticks, nil
}

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
