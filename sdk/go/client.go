// Package queuecore is the Go client of QueueCore, a multi-tenant pub/sub broker.
//
// Every call takes a context.Context; consumers stop when theirs is cancelled. Errors from
// the API are *Error values: use errors.As to read Code, Status and RequestID.
package queuecore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"
)

// Defaults of a Client.
const (
	DefaultBaseURL    = "http://127.0.0.1:8080"
	DefaultTimeout    = 30 * time.Second
	DefaultMaxRetries = 3
	MaxBatch          = 1000
	Version           = "0.1.0"
)

// Logger receives one line per retry and per consumer recovery; *log.Logger is one.
type Logger interface {
	Printf(format string, args ...any)
}

// Client is a client of one QueueCore environment (the API key's); safe for concurrent use.
type Client struct {
	Topics         *Topics
	ConsumerGroups *Groups // the groups of a topic (Python's consumer_groups, TypeScript's consumerGroups)
	Groups         *Groups // the same as ConsumerGroups
	Offsets        *Offsets
	DLQ            *DLQ
	Config         *RuntimeConfig // the environment's runtime configuration

	baseURL           string
	idempotentPublish bool
	logger            Logger // everything the SDK says, when WithLogger gave one
	warn              Logger // what must be seen: WithLogger's, else standard error
	transport         *transport
	publisher         *publisher
}

type settings struct {
	apiKey            string
	baseURL           string
	timeout           time.Duration
	maxRetries        int
	logger            Logger
	httpClient        *http.Client
	idempotentPublish bool
	batching          PublishBatching
}

// Option configures a Client.
type Option func(*settings)

// WithAPIKey sets the API key (default: QUEUECORE_API_KEY).
func WithAPIKey(key string) Option { return func(s *settings) { s.apiKey = key } }

// WithBaseURL sets the API's address (default: QUEUECORE_URL, else http://127.0.0.1:8080).
func WithBaseURL(url string) Option { return func(s *settings) { s.baseURL = url } }

// WithTimeout bounds each attempt of a call (default 30s).
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// WithMaxRetries bounds the retries of one call (default 3; 0 disables them).
func WithMaxRetries(n int) Option { return func(s *settings) { s.maxRetries = n } }

// WithLogger receives one line per event: retries, rejoins, and the errors consumers survive
// without an OnError (default: only those errors, to standard error).
func WithLogger(l Logger) Option { return func(s *settings) { s.logger = l } }

// WithPublishBatching says how concurrent Publish calls share requests (default: linger 5ms,
// 1000 messages, 1 MiB a request).
func WithPublishBatching(b PublishBatching) Option { return func(s *settings) { s.batching = b } }

// WithHTTPClient uses c for every request (its Timeout should be 0: streams are long).
func WithHTTPClient(c *http.Client) Option { return func(s *settings) { s.httpClient = c } }

// WithIdempotentPublish turns the generated idempotency keys off (on by default).
func WithIdempotentPublish(on bool) Option { return func(s *settings) { s.idempotentPublish = on } }

// New makes a Client; it fails when no API key is given or set in the environment.
func New(opts ...Option) (*Client, error) {
	s := settings{
		apiKey:            os.Getenv("QUEUECORE_API_KEY"),
		baseURL:           os.Getenv("QUEUECORE_URL"),
		timeout:           DefaultTimeout,
		maxRetries:        DefaultMaxRetries,
		idempotentPublish: true,
	}
	for _, opt := range opts {
		opt(&s)
	}
	if s.apiKey == "" {
		return nil, errors.New("queuecore: no API key: use WithAPIKey or set QUEUECORE_API_KEY")
	}
	if s.baseURL == "" {
		s.baseURL = DefaultBaseURL
	}
	if s.httpClient == nil {
		s.httpClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	t := &transport{
		http: s.httpClient, baseURL: strings.TrimRight(s.baseURL, "/"), apiKey: s.apiKey,
		timeout: s.timeout, maxRetries: s.maxRetries, logger: s.logger,
		userAgent: "queuecore-sdk-go/" + Version,
	}
	offsets := &Offsets{t: t}
	groups := &Groups{t: t, offsets: offsets}
	warn := s.logger
	if warn == nil {
		warn = log.New(os.Stderr, "", log.LstdFlags)
	}
	c := &Client{
		Topics: &Topics{t: t}, ConsumerGroups: groups, Groups: groups, Offsets: offsets,
		DLQ: &DLQ{t: t}, Config: &RuntimeConfig{t: t}, baseURL: t.baseURL, idempotentPublish: s.idempotentPublish,
		logger: s.logger, warn: warn, transport: t, publisher: newPublisher(t, s.batching),
	}
	c.publisher.resolve = c.resolveUnknown
	return c, nil
}

// String names the client's API without its key.
func (c *Client) String() string { return fmt.Sprintf("queuecore.Client(%s)", c.baseURL) }

// Close sends the publishes waiting for their batch (up to 30 s) and releases idle pooled
// connections.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.publisher.flush(ctx)
	c.transport.http.CloseIdleConnections()
	return err
}

// Health is GET /healthz: the API process answers.
func (c *Client) Health(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	err := c.transport.do(ctx, call{method: "GET", path: "/healthz", idempotent: true}, &out)
	return out, err
}

// Ready is GET /readyz: PostgreSQL, S3 and Redis checks; a 503 *Error when one fails.
func (c *Client) Ready(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	err := c.transport.do(ctx, call{method: "GET", path: "/readyz", idempotent: true}, &out)
	return out, err
}

// PublishOption sets the key, headers or idempotency key of one published message.
type PublishOption func(*OutgoingMessage)

// WithKey picks the partition by the hash of key.
func WithKey(key string) PublishOption { return func(m *OutgoingMessage) { m.Key = key } }

// WithHeaders attaches string headers to the message.
func WithHeaders(h map[string]string) PublishOption {
	return func(m *OutgoingMessage) { m.Headers = h }
}

// WithFairnessKey sets what a fair group schedules the message by ("" is a key).
func WithFairnessKey(key string) PublishOption {
	return func(m *OutgoingMessage) { m.FairnessKey = &key }
}

// WithThrottleKeys sets the message's throttle keys (up to 8).
func WithThrottleKeys(keys ...string) PublishOption {
	return func(m *OutgoingMessage) { m.ThrottleKeys = keys }
}

// WithIdempotencyKey replaces the generated idempotency key.
func WithIdempotencyKey(key string) PublishOption {
	return func(m *OutgoingMessage) { m.IdempotencyKey = key }
}

// Publish stores one message (any JSON value) and answers once it is durable.
//
// Calls made meanwhile from other goroutines go in the same batch request (WithPublishBatching);
// each gets its own result or its own error. Its idempotency key is generated once per call and
// reused by the retries, so a retry after a lost answer is never stored twice.
func (c *Client) Publish(ctx context.Context, topic string, data any, opts ...PublishOption) (*PublishResult, error) {
	return c.publisher.publish(ctx, topic, c.message(data, opts))
}

// PendingPublish is the outcome of PublishAsync, to Get when it is needed.
type PendingPublish struct{ done chan publishOutcome }

// Get waits for the publish (or ctx): where the message was stored, or why it was not.
func (p *PendingPublish) Get(ctx context.Context) (*PublishResult, error) {
	select {
	case outcome := <-p.done:
		p.done <- outcome // Get may be called again
		return outcome.result, outcome.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PublishAsync queues one message and returns at once; Get its outcome later. Messages
// published this way from one goroutine are batched together too.
func (c *Client) PublishAsync(topic string, data any, opts ...PublishOption) *PendingPublish {
	pending, err := c.publisher.enqueue(topic, c.message(data, opts))
	if err != nil {
		done := make(chan publishOutcome, 1)
		done <- publishOutcome{err: err}
		return &PendingPublish{done}
	}
	return &PendingPublish{pending.done}
}

// FindPublished is where the message published with idempotencyKey is stored (ErrNotFound
// when it is not).
func (c *Client) FindPublished(ctx context.Context, topic, idempotencyKey string) (*PublishResult, error) {
	out := &PublishResult{}
	path := escapePath("topics", topic, "messages", "by-idempotency-key", idempotencyKey)
	if err := c.transport.do(ctx, call{method: "GET", path: path, idempotent: true}, out); err != nil {
		return nil, err
	}
	out.IdempotencyKey = idempotencyKey
	return out, nil
}

// resolveUnknown settles an unknown publish outcome by its key: where it was stored, or unknown.
func (c *Client) resolveUnknown(ctx context.Context, topic, key string, unknown *Error) (*PublishResult, error) {
	if key == "" {
		return nil, unknown
	}
	found, err := c.FindPublished(ctx, topic, key)
	if err != nil {
		return nil, unknown
	}
	return found, nil
}

func (c *Client) message(data any, opts []PublishOption) OutgoingMessage {
	message := OutgoingMessage{Data: data}
	for _, opt := range opts {
		opt(&message)
	}
	return c.outgoing(message)
}

// PublishBatch stores up to 1000 messages atomically: all get offsets in one commit, or none.
func (c *Client) PublishBatch(ctx context.Context, topic string, messages []OutgoingMessage) (*BatchResult, error) {
	if len(messages) < 1 || len(messages) > MaxBatch {
		return nil, fmt.Errorf("queuecore: a batch holds 1 to %d messages, not %d", MaxBatch, len(messages))
	}
	wire := make([]OutgoingMessage, len(messages))
	idempotent := true
	for i, m := range messages {
		wire[i] = c.outgoing(m)
		idempotent = idempotent && wire[i].IdempotencyKey != ""
	}
	out := &BatchResult{}
	err := c.transport.do(ctx, call{
		method: "POST", path: escapePath("topics", topic, "messages", "batch"),
		body: map[string]any{"messages": wire}, idempotent: idempotent,
	}, out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Client) outgoing(m OutgoingMessage) OutgoingMessage {
	if m.IdempotencyKey == "" && c.idempotentPublish {
		m.IdempotencyKey = NewIdempotencyKey()
	}
	return m
}

// NewIdempotencyKey is a fresh key for one message: "sdk_" + 32 hex characters.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sdk_" + hex.EncodeToString(b[:])
}
