package engine

import (
	"strings"
	"testing"
)

func TestParseWeightVersion(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"42", 42, false}, {" 7 ", 7, false}, {"step-42", 42, false}, {"v0.43", 43, false},
		{"default", 0, false}, {"", 0, false}, {"step-", 0, false}, {"9223372036854775808", 0, true},
	} {
		got, err := ParseWeightVersion(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseWeightVersion(%q) = %d, %v; want %d, error %t", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// vLLM with several engine cores: every series counts.
func TestVLLMLoadSumsEngines(t *testing.T) {
	body := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
`
	if got, kv, err := vllmLoad([]byte(body)); err != nil || got != 9 || kv != 0 {
		t.Errorf("vllmLoad = %d, %d, %v; want 9, no KV size", got, kv, err)
	}
	if _, _, err := vllmLoad([]byte("# TYPE other gauge\nother 1\n")); err == nil || !strings.Contains(err.Error(), vllmRunning) {
		t.Errorf("without the gauges: %v; want an error naming %s", err, vllmRunning)
	}
}

// The KV cache's size is num_gpu_blocks × block_size of the cache config's
// info gauge, over every engine core; labels it cannot read count nothing.
func TestVLLMKVTokens(t *testing.T) {
	const gauges = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0
`
	for _, tt := range []struct {
		name, info string
		want       int64
	}{
		{"one core", `vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2048"} 1` + "\n", 32768},
		{"two cores", `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1` + "\n" +
			`vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="50"} 1` + "\n", 2400},
		{"blocks not yet known", `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="None"} 1` + "\n", 0},
		{"absent", "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := gauges
			if tt.info != "" {
				body += "# TYPE vllm:cache_config_info gauge\n" + tt.info
			}
			if _, kv, err := vllmLoad([]byte(body)); err != nil || kv != tt.want {
				t.Errorf("KV tokens %d, %v; want %d", kv, err, tt.want)
			}
		})
	}
}
