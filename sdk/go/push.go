package queuecore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// PushConfig makes a group a push group: its messages are POSTed to Endpoint (https), at most
// MaxInFlight at once (1 to 1000; 0 means 10), each failing after Timeout (up to 10 minutes; 0
// means 30 s); Ordered pushes one message at a time per key, in order.
type PushConfig struct {
	Endpoint    string
	MaxInFlight int
	Timeout     time.Duration
	Ordered     bool
}

func (p PushConfig) wire(rotate bool) map[string]any {
	body := map[string]any{"endpoint": p.Endpoint, "maxInFlight": 10, "timeout": "30s", "ordered": p.Ordered}
	setIf(body, "maxInFlight", p.MaxInFlight, p.MaxInFlight > 0)
	setIf(body, "timeout", durationMs(p.Timeout), p.Timeout > 0)
	setIf(body, "rotateSecret", true, rotate)
	return body
}

// PushSettings is where a push group's messages go, as the API reports it (the secret only as a
// hint).
type PushSettings struct {
	Endpoint    string `json:"endpoint"`
	MaxInFlight int    `json:"maxInFlight"`
	Timeout     string `json:"timeout"`
	Ordered     bool   `json:"ordered"`
	SecretHint  string `json:"secretHint"`
}

// Push is the group's push settings, or nil for an ordinary group.
func (g *Group) Push() *PushSettings {
	raw, ok := g.Config["push"].(map[string]any)
	if !ok {
		return nil
	}
	encoded, _ := json.Marshal(raw)
	out := &PushSettings{}
	if json.Unmarshal(encoded, out) != nil {
		return nil
	}
	return out
}

// PushTestResult is what a push group's endpoint answered a test push.
type PushTestResult struct {
	Delivered  bool    `json:"delivered"`
	StatusCode *int    `json:"statusCode"`
	Error      *string `json:"error"`
	ElapsedMs  int64   `json:"elapsedMs"`
}

// TestPush sends a signed "push.test" event to a push group's endpoint now (admin scope) and
// returns what it answered.
func (s *Groups) TestPush(ctx context.Context, topic, group string) (*PushTestResult, error) {
	out := &PushTestResult{}
	err := s.t.do(ctx, call{method: "POST", path: groupPath(topic, group, "push", "test")}, out)
	return orNil(out, err)
}

// PushMessage is the message a push request carries, once VerifyPush checked it.
type PushMessage struct {
	MessageID  string            `json:"messageId"`
	Topic      string            `json:"topic"`
	Group      string            `json:"group"`
	Partition  int               `json:"partition"`
	Offset     int64             `json:"offset"`
	Attempt    int               `json:"attempt"`
	Timestamp  time.Time         `json:"timestamp"`
	Key        *string           `json:"key"`
	Headers    map[string]string `json:"headers"`
	Data       json.RawMessage   `json:"data"`
	Encoding   string            `json:"encoding,omitempty"` // "base64": a Kafka producer's value that was not JSON
	Event      string            `json:"event"`              // "message", or "push.test" for a test push
	DeliveryID string            `json:"deliveryId"`         // new for every attempt; MessageID is the same on each
}

// DefaultPushTolerance is how far from now a push's timestamp may be: older (or further ahead)
// is refused as replayed.
const DefaultPushTolerance = 5 * time.Minute

// VerifyOption changes how VerifyPush checks a request.
type VerifyOption func(*verifyOptions)

type verifyOptions struct {
	tolerance time.Duration
	now       time.Time
}

// WithTolerance sets how far from now a push's timestamp may be (DefaultPushTolerance).
func WithTolerance(d time.Duration) VerifyOption { return func(o *verifyOptions) { o.tolerance = d } }

// WithNow sets the verifier's clock (for tests).
func WithNow(t time.Time) VerifyOption { return func(o *verifyOptions) { o.now = t } }

// VerifyPush returns the message of a push request after checking that its
// QueueCore-Signature is the group's signature of this raw body and that its
// QueueCore-Timestamp is within the tolerance of now. A refusal is an *Error with Code
// INVALID_PUSH_SIGNATURE or STALE_PUSH_TIMESTAMP and Status 401 (errors.Is(err,
// ErrPushVerification)): answer the request 401.
func VerifyPush(secret string, header http.Header, body []byte, opts ...VerifyOption) (*PushMessage, error) {
	options := verifyOptions{tolerance: DefaultPushTolerance, now: time.Now()}
	for _, opt := range opts {
		opt(&options)
	}
	stamp := header.Get("QueueCore-Timestamp")
	seconds, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return nil, pushRefusal("INVALID_PUSH_SIGNATURE", "no QueueCore-Timestamp header")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(stamp + "."))
	mac.Write(body)
	expected := "v1=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(header.Get("QueueCore-Signature")), []byte(expected)) {
		return nil, pushRefusal("INVALID_PUSH_SIGNATURE", "the signature is not the group's signature of this body")
	}
	age := options.now.Sub(time.Unix(seconds, 0))
	if math.Abs(float64(age)) > float64(options.tolerance) {
		when := fmt.Sprintf("%.0f s ago", age.Seconds())
		if age < 0 {
			when = fmt.Sprintf("%.0f s ahead", -age.Seconds())
		}
		return nil, pushRefusal("STALE_PUSH_TIMESTAMP", fmt.Sprintf("signed %s, more than %s from now", when, options.tolerance))
	}
	message := &PushMessage{}
	if err := json.Unmarshal(body, message); err != nil {
		return nil, pushRefusal("INVALID_PUSH_SIGNATURE", "the body is not a push: "+err.Error())
	}
	message.Event = header.Get("QueueCore-Event")
	if message.Event == "" {
		message.Event = "message"
	}
	message.DeliveryID = header.Get("QueueCore-Delivery")
	return message, nil
}

func pushRefusal(code, message string) *Error {
	return &Error{Code: code, Message: message, Status: http.StatusUnauthorized}
}
