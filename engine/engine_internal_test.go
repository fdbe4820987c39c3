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
	if got, err := vllmLoad([]byte(body)); err != nil || got != 9 {
		t.Errorf("vllmLoad = %d, %v; want 9", got, err)
	}
	if _, err := vllmLoad([]byte("# TYPE other gauge\nother 1\n")); err == nil || !strings.Contains(err.Error(), vllmRunning) {
		t.Errorf("without the gauges: %v; want an error naming %s", err, vllmRunning)
	}
}
