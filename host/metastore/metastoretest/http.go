package metastoretest

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// Do sends one request to the HTTP metastore at base over loopback, as
// any client that can reach it would (an attacker included), and returns
// the status, the body and the headers of the answer.
func Do(t testing.TB, method, base string, q url.Values, body []byte) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, base+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}
