package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The policies' answers: what an OpenAI-compatible engine returns for a
// short completion, and the /idle answer the router's poller reads.
const (
	modelName        = "bench"
	completionAnswer = `{"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"bench",` +
		`"choices":[{"index":0,"text":" one two three four","logprobs":null,"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":2,"completion_tokens":4,"total_tokens":6}}`
	idleAnswer      = `{"idle":true}`
	modelsAnswer    = `{"object":"list","data":[{"id":"bench","object":"model","owned_by":"bench"}]}`
	completionsBody = `{"model":"bench","prompt":"Say four words.","max_tokens":4}`

	// An SGLang-native /generate of token ids with logprobs, as slime's
	// rollout sends it (input_ids, sampling_params, return_logprob), and
	// the answer's fields as SGLang's output processor builds them
	// (python/sglang/srt/managers/tokenizer_manager_components/
	// output_processor.py, commit 7a464c40fc21; logprob triples as
	// logprob_ops.py, commit 229224a3f405, makes them): a request the
	// router can resume, read whole to see that it did not abort.
	generateBody = `{"input_ids":[1,450,4996,17354,1701,432,29889,1576,338,263,1243,29889,3529,590,395,526],` +
		`"sampling_params":{"max_new_tokens":4,"temperature":0},"return_logprob":true}`
)

// generateAnswer is the answer to a /generate of n prompt tokens. The
// same prompt comes on every request, so the engine holds it, and reports
// it cached but for its last token, which SGLang computes again to sample
// the next (Req._compute_max_prefix_len, python/sglang/srt/managers/
// schedule_batch.py, v0.5.18: a match is at most input_len - 1 tokens).
func generateAnswer(n int) string {
	return `{"text":" one two three four","output_ids":[697,1023,2211,3023],` +
		`"meta_info":{"id":"bench-0","finish_reason":{"type":"length","length":4},"prompt_tokens":` + strconv.Itoa(n) + `,` +
		`"completion_tokens":4,"cached_tokens":` + strconv.Itoa(n-1) + `,"weight_version":"default",` +
		`"output_token_logprobs":[[-0.12,697,null],[-0.34,1023,null],[-0.05,2211,null],[-0.41,3023,null]],` +
		`"output_token_logprobs_length":4,"input_token_logprobs":[]}}`
}

// A workload is what the load generator sends (path, body), and the
// answer of the upstream's POST /generate. A unique workload's body
// starts its token ids with uniqueDigits digits that the load generator
// rewrites on every request (a counter shared by the connections), so
// that no two requests share a prompt block.
type workload struct {
	path, body, generate string
	unique               bool
}

var workloads = map[string]workload{
	"completions": {"/v1/completions", completionsBody, generateAnswer(16), false},
	"generate":    {"/generate", generateBody, generateAnswer(16), false},
	"generate8k":  {"/generate", longGenerateBody(8192), generateAnswer(8192), false},
	// prompts that share nothing: the router hashes each whole
	"generate8k-unique": {"/generate", uniqueIDsFirst + longGenerateBody(8191)[len(`{"input_ids":[`):], generateAnswer(8192), true},
}

// uniqueDigits is how many digits of a unique workload's first token id
// the load generator rewrites; uniqueIDsFirst starts such a body.
const (
	uniqueDigits   = 7
	uniqueIDsFirst = `{"input_ids":[1000000,`
)

// longGenerateBody is generateBody with a prompt of n token ids (a long
// RL prompt: the proxy hashes it under prefix-cache affinity), the same
// ids on every request.
func longGenerateBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"input_ids":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(1 + (i*7919)%32000))
	}
	b.WriteString(`],"sampling_params":{"max_new_tokens":4,"temperature":0},"return_logprob":true}`)
	return b.String()
}

// childEnv, set in a child's environment, makes the benchmark's own binary
// run as that child instead (upstream, bare or serve-profiled).
const childEnv = "POLICYROUTER_PROXYBENCH_CHILD"

// runChild runs this process as the child its environment names, and
// reports whether it was one.
func runChild() (bool, error) {
	switch os.Getenv(childEnv) {
	case "":
		return false, nil
	case "upstream":
		return true, serveUpstream()
	case "serve":
		return true, serveProfiled(os.Args[1:])
	case "bare":
		return true, serveBare(os.Args[1:])
	default:
		return true, fmt.Errorf("%s: unknown child %q", childEnv, os.Getenv(childEnv))
	}
}

// serveUpstream answers on the listeners inherited as fds 3, 4, ... (one
// per policy) until SIGTERM: POST /v1/completions, POST /generate, GET
// /idle and GET /v1/models, each at once with a fixed answer.
func serveUpstream() error {
	n, err := strconv.Atoi(os.Getenv("POLICYROUTER_PROXYBENCH_LISTENERS"))
	if err != nil {
		return fmt.Errorf("upstream: listener count: %w", err)
	}
	fixed := func(body string) http.HandlerFunc {
		b := []byte(body)
		size := []string{strconv.Itoa(len(b))}
		return func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			h["Content-Length"] = size
			_, _ = w.Write(b)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", fixed(completionAnswer))
	mux.Handle("POST /generate", fixed(workloads[os.Getenv("POLICYROUTER_PROXYBENCH_WORKLOAD")].generate))
	mux.Handle("GET /idle", fixed(idleAnswer))
	mux.Handle("GET /v1/models", fixed(modelsAnswer))
	srv := &http.Server{Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errs := make(chan error, n)
	for i := range n {
		ln, err := net.FileListener(os.NewFile(uintptr(3+i), "listener"))
		if err != nil {
			return fmt.Errorf("upstream: listener %d: %w", i, err)
		}
		go func() { errs <- srv.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errs:
		return err
	}
}

// goUpstream starts the Go upstream as a child, listening on n loopback
// ports, and returns it with the policies' base URLs.
func goUpstream(dir, wl string, n int) (*child, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"=upstream", "POLICYROUTER_PROXYBENCH_LISTENERS="+strconv.Itoa(n), "POLICYROUTER_PROXYBENCH_WORKLOAD="+wl)
	var urls []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		f, err := ln.(*net.TCPListener).File()
		ln.Close()
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		urls = append(urls, "http://"+ln.Addr().String())
	}
	c, err := startChild("upstream-go", dir, cmd)
	if err != nil {
		return nil, nil, err
	}
	return c, urls, nil
}

// nginxUpstream starts nginx as the upstream: n loopback ports answering
// with the same fixed JSON as the Go upstream.
func nginxUpstream(ctx context.Context, nginx, dir, wl string, n int) (*child, []string, error) {
	var listen strings.Builder
	var urls []string
	for range n {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(&listen, "\t\tlisten 127.0.0.1:%d;\n", port)
		urls = append(urls, "http://127.0.0.1:"+strconv.Itoa(port))
	}
	server := listen.String() + `		default_type application/json;
		location = /v1/completions { return 200 '` + completionAnswer + `'; }
		location = /generate { return 200 '` + workloads[wl].generate + `'; }
		location = /idle { return 200 '` + idleAnswer + `'; }
		location = /v1/models { return 200 '` + modelsAnswer + `'; }
`
	c, err := startNginx(ctx, nginx, filepath.Join(dir, "upstream"), "upstream-nginx", "\tserver {\n"+server+"\t}\n", urls[0]+"/idle")
	if err != nil {
		return nil, nil, err
	}
	return c, urls, nil
}

// nginxProxy starts nginx as a reverse proxy to the policies:
// proxy_pass to an upstream group with keep-alive connections, round
// robin, an access log in its default format, and returns it with its
// base URL.
func nginxProxy(ctx context.Context, nginx, dir string, policies []string, conns int) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	var servers strings.Builder
	for _, u := range policies {
		fmt.Fprintf(&servers, "\t\tserver %s;\n", strings.TrimPrefix(u, "http://"))
	}
	// An access log, as serve writes one line per request by default.
	server := fmt.Sprintf(`		listen 127.0.0.1:%d;
		access_log %s/access.log;
		location / {
			proxy_pass http://policies;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
`, port, filepath.Join(dir, "proxy"))
	upstream := "\tupstream policies {\n" + servers.String() + fmt.Sprintf("\t\tkeepalive %d;\n\t\tkeepalive_requests 1000000;\n\t}\n", conns)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	c, err := startNginx(ctx, nginx, filepath.Join(dir, "proxy"), "nginx", upstream+"\tserver {\n"+server+"\t}\n", base+"/idle")
	if err != nil {
		return nil, "", err
	}
	return c, base, nil
}

// startNginx runs nginx in the foreground with its prefix in dir, one
// worker per CPU, no access log, and http holding the blocks of its http
// context; ready is a URL that answers once it serves.
func startNginx(ctx context.Context, nginx, dir, name, http, ready string) (*child, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := `daemon off;
worker_processes auto;
pid ` + dir + `/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
	access_log off;
	keepalive_requests 1000000;
	keepalive_timeout 120s;
	client_body_temp_path ` + dir + `/body;
	proxy_temp_path ` + dir + `/proxy;
	fastcgi_temp_path ` + dir + `/fastcgi;
	uwsgi_temp_path ` + dir + `/uwsgi;
	scgi_temp_path ` + dir + `/scgi;
` + http + "}\n"
	path := dir + "/nginx.conf"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	c, err := startChild(name, dir, exec.Command(nginx, "-e", "stderr", "-p", dir, "-c", path))
	if err != nil {
		return nil, err
	}
	if err := c.waitHTTP(ctx, ready); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}
