package queuecore

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSSEReaderYieldsEventsAndSkipsComments(t *testing.T) {
	stream := ": keepalive\r\n\r\nid: a1\r\nevent: message\r\ndata: {\"n\":1}\r\n\r\n" +
		"event: error\ndata: {\"code\":\"MEMBER_NOT_FOUND\"}\n\ndata: tail"
	lines := 0
	r := newSSEReader(strings.NewReader(stream), func() { lines++ })
	want := []sseEvent{{"message", `{"n":1}`}, {"error", `{"code":"MEMBER_NOT_FOUND"}`}, {"message", "tail"}}
	for _, w := range want {
		got, err := r.next()
		if err != nil || got != w {
			t.Fatalf("want %+v, got %+v (%v)", w, got, err)
		}
	}
	if _, err := r.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF at the end, got %v", err)
	}
	if lines != 10 {
		t.Fatalf("the idle deadline is pushed back per line: %d lines seen", lines)
	}
}

func TestErrorEventGetsTheStatusOfItsCode(t *testing.T) {
	err := errorFromEvent([]byte(`{"code":"MEMBER_NOT_FOUND","message":"gone"}`), "req_1")
	if err.Status != 404 || err.Code != "MEMBER_NOT_FOUND" || err.Message != "gone" || err.RequestID != "req_1" {
		t.Fatalf("unexpected %+v", err)
	}
	if errorFromEvent([]byte(`{}`), "req_2").Status != 503 {
		t.Fatal("an unknown stream failure is a retryable 503")
	}
}

func TestErrorFromResponseReadsTheBodyAndRetryAfter(t *testing.T) {
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"2"}, "X-Request-Id": {"req_h"}}}
	body := []byte(`{"error":{"code":"RATE_LIMIT_EXCEEDED","message":"slow down","status":429,"requestId":"req_b"}}`)
	err := errorFromResponse(resp, body, "req_sent")
	if err.Code != "RATE_LIMIT_EXCEEDED" || err.RequestID != "req_b" || err.RetryAfter != 2*time.Second {
		t.Fatalf("unexpected %+v", err)
	}
	bare := errorFromResponse(&http.Response{StatusCode: 502, Header: http.Header{}}, []byte("<html>"), "req_sent")
	if bare.Code != "HTTP_502" || bare.RequestID != "req_sent" || !bare.Transient() {
		t.Fatalf("a proxy's answer keeps the sent request id: %+v", bare)
	}
}

func TestOnlySafeCallsAreRetried(t *testing.T) {
	cases := []struct {
		status     int
		idempotent bool
		want       bool
	}{
		{429, false, true}, {503, true, true}, {503, false, false}, {504, true, true},
		{500, true, false}, {409, true, false}, {404, true, false},
	}
	for _, c := range cases {
		if got := retryable(&Error{Status: c.status}, nil, c.idempotent); got != c.want {
			t.Errorf("status %d idempotent %v: retry %v, want %v", c.status, c.idempotent, got, c.want)
		}
	}
}
