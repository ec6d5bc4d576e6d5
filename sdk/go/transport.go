package queuecore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Retry policy. A call is sent again, up to MaxRetries times, when:
//   - the server answered 429 (refused before anything ran): after Retry-After plus a little
//     jitter, else exponential backoff with full jitter;
//   - the connection could not be made (nothing was sent);
//   - the server answered 502/503/504, or the answer was lost, and the call is idempotent.
//
// Every attempt of one call carries the same X-Request-Id.
const (
	backoffBase      = 500 * time.Millisecond
	backoffMax       = 8 * time.Second
	retryAfterJitter = 0.2
)

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

type transport struct {
	http       *http.Client
	baseURL    string
	apiKey     string
	timeout    time.Duration
	maxRetries int
	logger     Logger
	userAgent  string
}

// call is one API request: its body is encoded once and reused by every attempt.
type call struct {
	method     string
	path       string
	query      url.Values
	body       any
	raw        []byte // a body already encoded as JSON (instead of body)
	idempotent bool
	timeout    time.Duration // per attempt; 0 means the client's
}

func newRequestID() string {
	var b strings.Builder
	b.WriteString("req_")
	for i := 0; i < 24; i++ {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		b.WriteByte(alphabet[n.Int64()])
	}
	return b.String()
}

// jitter is this process's own source: the global one is not seeded before Go 1.20, and
// clients that back off in step defeat the jitter.
var jitter = struct {
	sync.Mutex
	*mrand.Rand
}{Rand: mrand.New(mrand.NewSource(time.Now().UnixNano()))}

func random(n int64) int64 {
	jitter.Lock()
	defer jitter.Unlock()
	return jitter.Int63n(n)
}

func backoff(attempt int) time.Duration {
	ceiling := backoffBase << uint(attempt)
	if ceiling > backoffMax || ceiling <= 0 {
		ceiling = backoffMax
	}
	return time.Duration(random(int64(ceiling) + 1))
}

// do sends c with retries and decodes a JSON answer into out (when out is not nil).
func (t *transport) do(ctx context.Context, c call, out any) error {
	resp, err := t.send(ctx, c, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return &Error{Code: "CONNECTION_ERROR", Message: err.Error(), Err: err}
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, out)
}

// send attempts until success, a final error, or the retry budget is spent. With stream the
// response body is returned open and no attempt timeout applies after the headers.
func (t *transport) send(ctx context.Context, c call, stream bool) (*http.Response, error) {
	payload, err := encode(c.body)
	if err != nil {
		return nil, err
	}
	if c.raw != nil {
		payload = c.raw
	}
	requestID := newRequestID()
	for attempt := 0; ; attempt++ {
		resp, err := t.attempt(ctx, c, payload, requestID, stream)
		if err == nil {
			return resp, nil
		}
		failure := asError(err)
		if attempt >= t.maxRetries || ctx.Err() != nil || !retryable(failure, err, c.idempotent) {
			return nil, failure
		}
		delay := retryDelay(failure, attempt)
		t.logf("queuecore retry %d/%d of %s %s in %s after %s (request %s)",
			attempt+1, t.maxRetries, c.method, c.path, delay.Round(time.Millisecond), failure.Code, requestID)
		if !sleep(ctx, delay) {
			return nil, failure
		}
	}
}

func (t *transport) attempt(ctx context.Context, c call, payload []byte, requestID string, stream bool) (*http.Response, error) {
	timeout := c.timeout
	if timeout == 0 {
		timeout = t.timeout
	}
	attemptCtx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(timeout, cancel)
	req, err := t.request(attemptCtx, c, payload, requestID)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := t.http.Do(req)
	if err != nil {
		stopped := !timer.Stop()
		cancel()
		return nil, networkError(c, requestID, err, stopped && ctx.Err() == nil)
	}
	if resp.StatusCode >= 400 {
		defer cancel()
		defer resp.Body.Close()
		timer.Stop()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, errorFromResponse(resp, body, requestID)
	}
	if stream {
		timer.Stop()
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { timer.Stop(); cancel() }}
	return resp, nil
}

func (t *transport) request(ctx context.Context, c call, payload []byte, requestID string) (*http.Request, error) {
	target := t.baseURL + c.path
	if len(c.query) > 0 {
		target += "?" + c.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, target, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.apiKey)
	req.Header.Set("User-Agent", t.userAgent)
	req.Header.Set("X-Request-Id", requestID)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

func (t *transport) logf(format string, args ...any) {
	if t.logger != nil {
		t.logger.Printf(format, args...)
	}
}

// cancelBody releases the attempt's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func encode(body any) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	return json.Marshal(body)
}

func networkError(c call, requestID string, err error, timedOut bool) *Error {
	code := "CONNECTION_ERROR"
	if timedOut {
		code = "TIMEOUT"
	}
	message := fmt.Sprintf("%s %s: %v", c.method, c.path, err)
	return &Error{Code: code, Message: message, RequestID: requestID, Err: err}
}

func asError(err error) *Error {
	var out *Error
	if errors.As(err, &out) {
		return out
	}
	return &Error{Code: "CLIENT_ERROR", Message: err.Error(), Err: err}
}

// nothingSent reports a failure to connect: the server cannot have seen the request.
func nothingSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func retryable(failure *Error, err error, idempotent bool) bool {
	switch {
	case failure.Status == http.StatusTooManyRequests:
		return true
	case failure.Status == 502 || failure.Status == 503 || failure.Status == 504:
		return idempotent
	case failure.Status != 0 || failure.Code == "CLIENT_ERROR":
		return false
	}
	return nothingSent(err) || idempotent
}

func retryDelay(failure *Error, attempt int) time.Duration {
	if failure.RetryAfter > 0 {
		spread := int64(retryAfterJitter*float64(failure.RetryAfter)) + 1
		return failure.RetryAfter + time.Duration(random(spread))
	}
	return backoff(attempt)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// escapePath is /v1/… with each segment percent-encoded (names may hold any character).
func escapePath(segments ...string) string {
	parts := make([]string, len(segments))
	for i, s := range segments {
		parts[i] = url.PathEscape(s)
	}
	return "/v1/" + strings.Join(parts, "/")
}
