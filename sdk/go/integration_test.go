package queuecore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// faultProxy stands between the SDK and the real API; fault may answer a request itself
// (after forwarding it or not) to imitate a lost answer, a rate limit or a proxy.
type faultProxy struct {
	*httptest.Server
	mu    sync.Mutex
	seen  []*http.Request
	fault func(n int, w http.ResponseWriter, r *http.Request, forward func() *httptest.ResponseRecorder) bool
}

func newFaultProxy(t *testing.T) *faultProxy {
	t.Helper()
	target, err := url.Parse(os.Getenv("QUEUECORE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	upstream := httputil.NewSingleHostReverseProxy(target)
	upstream.FlushInterval = -1 // streams pass through as they are written
	p := &faultProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		p.mu.Lock()
		kept := r.Clone(context.Background())
		kept.Body = io.NopCloser(bytes.NewReader(body))
		p.seen = append(p.seen, kept)
		n, fault := len(p.seen), p.fault
		p.mu.Unlock()
		forward := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			upstream.ServeHTTP(rec, r)
			return rec
		}
		if fault == nil || !fault(n, w, r, forward) {
			upstream.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) requests(method, pathSuffix string) []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*http.Request
	for _, r := range p.seen {
		if r.Method == method && strings.HasSuffix(r.URL.Path, pathSuffix) {
			out = append(out, r)
		}
	}
	return out
}

// recordingLogger keeps what the SDK logs.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func writeError(w http.ResponseWriter, status int, code string, header map[string]string) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"injected","status":%d,"requestId":"req_injected"}}`, code, status)
}

func newTopic(t *testing.T, client *queuecore.Client, partitions int) string {
	t.Helper()
	name := unique("go")
	if _, err := client.Topics.Create(testContext(t, 10*time.Second), queuecore.TopicConfig{Name: name, Partitions: queuecore.Int(partitions)}); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestPublishWhoseAnswerIsLostIsRetriedWithTheSameKeyAndStoredOnce(t *testing.T) {
	direct := liveClient(t)
	topic := newTopic(t, direct, 1)
	proxy := newFaultProxy(t)
	proxy.fault = func(n int, w http.ResponseWriter, r *http.Request, forward func() *httptest.ResponseRecorder) bool {
		if r.Method != "POST" || len(proxy.requests("POST", "/messages")) != 1 {
			return false
		}
		forward() // the server stores it; the answer is lost at the gateway
		writeError(w, 503, "SERVICE_UNAVAILABLE", nil)
		return true
	}
	logger := &recordingLogger{}
	client := liveClient(t, queuecore.WithBaseURL(proxy.URL), queuecore.WithLogger(logger))
	result, err := client.Publish(testContext(t, 30*time.Second), topic, map[string]int{"amount": 1})
	if err != nil {
		t.Fatal(err)
	}
	attempts := proxy.requests("POST", "/messages")
	if len(attempts) != 2 {
		t.Fatalf("want 2 attempts, got %d", len(attempts))
	}
	keys, ids := map[string]bool{}, map[string]bool{}
	for _, a := range attempts {
		var body struct{ IdempotencyKey string }
		raw, _ := io.ReadAll(a.Body)
		_ = json.Unmarshal(raw, &body)
		keys[body.IdempotencyKey], ids[a.Header.Get("X-Request-Id")] = true, true
	}
	if len(keys) != 1 || !keys[result.IdempotencyKey] || !strings.HasPrefix(result.IdempotencyKey, "sdk_") {
		t.Fatalf("both attempts carry the call's one key %q: %v", result.IdempotencyKey, keys)
	}
	if len(ids) != 1 {
		t.Fatalf("both attempts carry one request id: %v", ids)
	}
	described, err := direct.Topics.Describe(testContext(t, 10*time.Second), topic)
	if err != nil || described.Stats.Depth != 1 || result.Offset != 0 {
		t.Fatalf("stored once at offset 0: depth %+v, offset %d, err %v", described.Stats, result.Offset, err)
	}
	logged := strings.Join(logger.lines, "\n")
	if !strings.Contains(logged, "retry 1/3 of POST") || strings.Contains(logged, os.Getenv("QUEUECORE_API_KEY")) {
		t.Fatalf("the logger sees the retry and never the key:\n%s", logged)
	}
}

func TestRateLimitIsRetriedAfterRetryAfter(t *testing.T) {
	liveClient(t)
	proxy := newFaultProxy(t)
	client := liveClient(t, queuecore.WithBaseURL(proxy.URL))
	limited := len(proxy.requests("GET", "")) + 1
	proxy.fault = func(n int, w http.ResponseWriter, r *http.Request, _ func() *httptest.ResponseRecorder) bool {
		if n == limited {
			writeError(w, 429, "RATE_LIMIT_EXCEEDED", map[string]string{"Retry-After": "1"})
			return true
		}
		return false
	}
	started := time.Now()
	if _, err := client.Topics.List(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(started); waited < time.Second {
		t.Fatalf("the retry came after %s, before Retry-After's 1s", waited)
	}
}

func TestRateLimitWithoutRetriesIsATypedError(t *testing.T) {
	liveClient(t)
	proxy := newFaultProxy(t)
	client := liveClient(t, queuecore.WithBaseURL(proxy.URL), queuecore.WithMaxRetries(0))
	proxy.fault = func(n int, w http.ResponseWriter, r *http.Request, _ func() *httptest.ResponseRecorder) bool {
		writeError(w, 429, "RATE_LIMIT_EXCEEDED", map[string]string{"Retry-After": "2"})
		return true
	}
	_, err := client.Topics.List(testContext(t, 10*time.Second))
	var apiErr *queuecore.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.RetryAfter != 2*time.Second || apiErr.RequestID != "req_injected" {
		t.Fatalf("want a 429 *Error with RetryAfter 2s, got %#v", err)
	}
}

func TestTopicCreateIsNotRepeatedAfterALostAnswer(t *testing.T) {
	liveClient(t)
	proxy := newFaultProxy(t)
	proxy.fault = func(n int, w http.ResponseWriter, r *http.Request, forward func() *httptest.ResponseRecorder) bool {
		if r.Method != "POST" {
			return false
		}
		forward()
		writeError(w, 503, "SERVICE_UNAVAILABLE", nil)
		return true
	}
	client := liveClient(t, queuecore.WithBaseURL(proxy.URL))
	_, err := client.Topics.Create(testContext(t, 30*time.Second), queuecore.TopicConfig{Name: unique("go")})
	var apiErr *queuecore.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 503 {
		t.Fatalf("want the 503, got %v", err)
	}
	if n := len(proxy.requests("POST", "/v1/topics")); n != 1 {
		t.Fatalf("a create is sent once, not %d times", n)
	}
}

// collector records a consumer's events and handled messages.
type collector struct {
	mu       sync.Mutex
	events   []queuecore.Event
	messages []*queuecore.Message
}

func (c *collector) event(e queuecore.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *collector) handle(ctx context.Context, msg *queuecore.Message) error {
	c.mu.Lock()
	c.messages = append(c.messages, msg)
	c.mu.Unlock()
	return msg.Ack(ctx)
}

func (c *collector) count() (events, messages int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events), len(c.messages)
}

func (c *collector) has(kind queuecore.EventKind, memberOtherThan string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e.Kind == kind && e.MemberID != memberOtherThan {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, timeout time.Duration, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if check() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s", what, timeout)
}

func TestConsumerFallsBackToPullWhenTheStreamIsRefused(t *testing.T) {
	direct := liveClient(t)
	topic := newTopic(t, direct, 1)
	proxy := newFaultProxy(t)
	proxy.fault = func(n int, w http.ResponseWriter, r *http.Request, _ func() *httptest.ResponseRecorder) bool {
		if strings.HasSuffix(r.URL.Path, "/stream") {
			writeError(w, 404, "NOT_FOUND", nil) // a proxy that does not route streams
			return true
		}
		return false
	}
	client := liveClient(t, queuecore.WithBaseURL(proxy.URL))
	ctx := testContext(t, 60*time.Second)
	if _, err := direct.Publish(ctx, topic, "hello"); err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	consumer, err := client.Consume(ctx, topic, "g", queuecore.ConsumeOptions{StartFrom: "earliest", Wait: time.Second, OnEvent: c.event})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(ctx, c.handle); err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	eventually(t, 20*time.Second, "the message arrives by pull", func() bool { _, n := c.count(); return n == 1 })
	if len(proxy.requests("POST", "/pull")) == 0 {
		t.Fatal("no pull was made")
	}
}

func TestConsumerRejoinsWhenTheServerForgetsItsMember(t *testing.T) {
	client := liveClient(t)
	topic := newTopic(t, client, 2)
	ctx := testContext(t, 60*time.Second)
	c := &collector{}
	consumer, err := client.Consume(ctx, topic, "g", queuecore.ConsumeOptions{SessionTimeout: 3 * time.Second, OnEvent: c.event})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(ctx, c.handle); err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	first := consumer.Membership().MemberID
	evict(t, topic, "g", first)
	eventually(t, 20*time.Second, "rebalanced as a new member", func() bool { return c.has(queuecore.EventRebalanced, first) })
	if _, err := client.Publish(ctx, topic, "after the rejoin"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a message after the rejoin", func() bool { _, n := c.count(); return n == 1 })
	if now := consumer.Membership().MemberID; now == first {
		t.Fatalf("still member %s", now)
	}
}

// evict removes a member as the server does after its session timeout.
func evict(t *testing.T, topic, group, member string) {
	t.Helper()
	target := fmt.Sprintf("%s/v1/topics/%s/groups/%s/members/%s", os.Getenv("QUEUECORE_URL"), topic, group, member)
	req, _ := http.NewRequest("DELETE", target, nil)
	req.Header.Set("Authorization", "Bearer "+os.Getenv("QUEUECORE_API_KEY"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("evict: %s", resp.Status)
	}
}

func TestASecondMemberRebalancesTheFirst(t *testing.T) {
	client := liveClient(t)
	topic := newTopic(t, client, 2)
	ctx := testContext(t, 60*time.Second)
	first := &collector{}
	opts := queuecore.ConsumeOptions{SessionTimeout: 3 * time.Second, OnEvent: first.event}
	a, err := client.Consume(ctx, topic, "g", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, first.handle); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.Consume(ctx, topic, "g", queuecore.ConsumeOptions{SessionTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, (&collector{}).handle); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eventually(t, 20*time.Second, "the first member is rebalanced", func() bool { return first.has(queuecore.EventRebalanced, "") })
	eventually(t, 20*time.Second, "each member owns one partition", func() bool {
		return len(a.Membership().Assignments) == 1 && len(b.Membership().Assignments) == 1
	})
}

func TestCancellingTheContextStopsTheConsumerAndLeavesTheGroup(t *testing.T) {
	client := liveClient(t)
	topic := newTopic(t, client, 1)
	ctx, cancel := context.WithCancel(context.Background())
	consumer, err := client.Consume(ctx, topic, "g", queuecore.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- consumer.Run(ctx, (&collector{}).handle) }()
	eventually(t, 10*time.Second, "joined", func() bool { return consumer.Membership() != nil })
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returns the context's error, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	group, err := client.Groups.Describe(testContext(t, 10*time.Second), topic, "g")
	if err != nil || group.Consumers != 0 {
		t.Fatalf("the member left: %+v %v", group, err)
	}
}

func TestNackedMessageReachesTheDLQWithItsErrorText(t *testing.T) {
	client := liveClient(t)
	topic := newTopic(t, client, 1)
	ctx := testContext(t, 60*time.Second)
	if _, err := client.Publish(ctx, topic, map[string]int{"amount": -5}); err != nil {
		t.Fatal(err)
	}
	consumer, err := client.Consume(ctx, topic, "g", queuecore.ConsumeOptions{
		StartFrom: "earliest", Pull: true, Wait: time.Second,
		DeadLetter: &queuecore.DeadLetterPolicy{MaxRetries: queuecore.Int(1), RetryDelay: 50 * time.Millisecond, AlertThreshold: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		return fmt.Errorf("attempt %d: card declined", msg.Attempt)
	}); err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var page *queuecore.DeadLetterPage
	eventually(t, 20*time.Second, "dead-lettered", func() bool {
		page, err = client.DLQ.Inspect(ctx, topic, "g", queuecore.InspectOptions{})
		return err == nil && page.Depth == 1
	})
	if page.Messages[0].Attempts != 2 || page.Messages[0].Error != "attempt 2: card declined" {
		t.Fatalf("unexpected dead letter %+v", page.Messages[0])
	}
	group, err := client.Groups.Describe(ctx, topic, "g")
	if err != nil || group.Config["deadLetter"].(map[string]any)["alertThreshold"] != float64(10) {
		t.Fatalf("the consume-time settings reached the group: %+v %v", group, err)
	}
}
