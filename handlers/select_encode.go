package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/policyrouter/policyrouter/api"
)

// writeSelected writes an api.SelectResponse by hand: the document
// encoding/json gives, without reflecting over the struct on every
// /select. TestAnswersMatchEncodingJSON holds the two together.
func writeSelected(w http.ResponseWriter, resp *api.SelectResponse) {
	b := buffers.Get().(*jsonBuffer)
	defer b.release()
	buf := b.buf.AvailableBuffer() // its spare room: b.buf itself stays empty
	buf = append(buf, `{"index":`...)
	buf = strconv.AppendInt(buf, int64(resp.Index), 10)
	buf = append(buf, `,"id":`...)
	buf = appendJSONString(buf, resp.ID)
	buf = append(buf, `,"url":`...)
	buf = appendJSONString(buf, resp.URL)
	buf = append(buf, `,"node_id":`...)
	buf = appendJSONString(buf, resp.NodeID)
	if resp.LeaseID != "" {
		buf = append(buf, `,"lease_id":`...)
		buf = appendJSONString(buf, resp.LeaseID)
	}
	buf = append(buf, `,"version":`...)
	buf = strconv.AppendInt(buf, resp.Version, 10)
	if resp.WeightVersion != "" {
		buf = append(buf, `,"weight_version":`...)
		buf = appendJSONString(buf, resp.WeightVersion)
	}
	if resp.Sticky != "" {
		buf = append(buf, `,"sticky":`...)
		buf = appendJSONString(buf, resp.Sticky)
	}
	if resp.EnvUnmapped {
		buf = append(buf, `,"env_unmapped":true`...)
	}
	if resp.PrefixMatch != nil {
		buf = append(buf, `,"prefix_match":`...)
		buf = strconv.AppendInt(buf, int64(*resp.PrefixMatch), 10)
	}
	if resp.PrefixOutcome != "" {
		buf = append(buf, `,"prefix_outcome":`...)
		buf = appendJSONString(buf, resp.PrefixOutcome)
	}
	buf = append(buf, "}\n"...)
	writeBody(w, http.StatusOK, buf)
}

// writeReleased writes an api.ReleaseResponse by hand, as writeSelected
// does for /select.
func writeReleased(w http.ResponseWriter, resp *api.ReleaseResponse) {
	b := buffers.Get().(*jsonBuffer)
	defer b.release()
	buf := b.buf.AvailableBuffer() // its spare room: b.buf itself stays empty
	buf = append(buf, `{"released":`...)
	buf = strconv.AppendBool(buf, resp.Released)
	buf = append(buf, `,"lease_id":`...)
	buf = appendJSONString(buf, resp.LeaseID)
	if resp.Index != nil {
		buf = append(buf, `,"index":`...)
		buf = strconv.AppendInt(buf, int64(*resp.Index), 10)
	}
	if resp.ID != "" {
		buf = append(buf, `,"id":`...)
		buf = appendJSONString(buf, resp.ID)
	}
	if resp.Reason != "" {
		buf = append(buf, `,"reason":`...)
		buf = appendJSONString(buf, resp.Reason)
	}
	if resp.How != "" {
		buf = append(buf, `,"how":`...)
		buf = appendJSONString(buf, resp.How)
	}
	buf = append(buf, "}\n"...)
	writeBody(w, http.StatusOK, buf)
}

// appendJSONString appends s as a JSON string, as encoding/json writes it
// with SetEscapeHTML(false). Printable ASCII without quotes or
// backslashes, which policy ids, URLs, node ids and lease ids are, is
// copied as it is; anything else goes through encoding/json.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return appendJSONStringSlow(buf, s)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

func appendJSONStringSlow(buf []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic("handlers: encode string: " + err.Error()) // a string: cannot fail
	}
	return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}
