package queuecore

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is every error the API (or the network) answers: use errors.As to read it.
//
// Status is 0 when no answer was received (Code is then CONNECTION_ERROR or TIMEOUT);
// RequestID is the server's, or the one the SDK sent, so the attempt can be found in logs.
type Error struct {
	Code       string
	Message    string
	Status     int
	RequestID  string
	RetryAfter time.Duration  // a 429's or 503's Retry-After header, else 0
	Body       map[string]any // the whole error answer, e.g. "rejected" of ACK_REJECTED
	Err        error          // the network error, when there was no answer
}

// Error formats code, message, status and request id.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (status %d, request %s)", e.Code, e.Message, e.Status, e.RequestID)
}

// Unwrap gives the network error, so errors.Is(err, context.Canceled) works.
func (e *Error) Unwrap() error { return e.Err }

// Transient reports whether trying again later may succeed (network, 429, 5xx).
func (e *Error) Transient() bool {
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// Rejected lists the {"ackId", "reason"} pairs of an ACK_REJECTED error.
func (e *Error) Rejected() []AckRejection {
	raw, _ := json.Marshal(e.Body["rejected"])
	var out []AckRejection
	_ = json.Unmarshal(raw, &out)
	return out
}

// statusByCode is the HTTP status of codes that arrive without one (SSE error events).
var statusByCode = map[string]int{
	"INVALID_API_KEY":     401,
	"FORBIDDEN":           403,
	"MEMBER_NOT_FOUND":    404,
	"GROUP_NOT_FOUND":     404,
	"TOPIC_NOT_FOUND":     404,
	"SERVICE_UNAVAILABLE": 503,
}

func errorFromResponse(resp *http.Response, body []byte, sentID string) *Error {
	var envelope map[string]any
	_ = json.Unmarshal(body, &envelope)
	inner, _ := envelope["error"].(map[string]any)
	out := &Error{
		Code:      stringOr(inner["code"], fmt.Sprintf("HTTP_%d", resp.StatusCode)),
		Message:   stringOr(inner["message"], http.StatusText(resp.StatusCode)),
		Status:    resp.StatusCode,
		RequestID: stringOr(inner["requestId"], stringOr(resp.Header.Get("X-Request-Id"), sentID)),
		Body:      envelope,
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		out.RetryAfter = retryAfter(resp.Header)
	}
	return out
}

func errorFromEvent(data []byte, requestID string) *Error {
	var fields map[string]any
	_ = json.Unmarshal(data, &fields)
	code := stringOr(fields["code"], "SERVICE_UNAVAILABLE")
	status, ok := statusByCode[code]
	if !ok {
		status = 503
	}
	message := stringOr(fields["message"], "the stream ended")
	return &Error{Code: code, Message: message, Status: status, RequestID: requestID,
		Body: map[string]any{"error": fields}}
}

func retryAfter(header http.Header) time.Duration {
	seconds, err := strconv.ParseFloat(strings.TrimSpace(header.Get("Retry-After")), 64)
	if err != nil || seconds < 0 {
		return 0
	}
	return time.Duration(seconds * float64(time.Second))
}

func stringOr(value any, fallback string) string {
	if text, ok := value.(string); ok && text != "" {
		return text
	}
	return fallback
}

// Kinds of errors, for errors.Is: errors.Is(err, queuecore.ErrNotFound) is true for any 404
// (TOPIC_NOT_FOUND, GROUP_NOT_FOUND, ...). Use errors.As with *Error for the code and request id.
var (
	ErrUnauthorized          = errors.New("queuecore: unauthorized")            // 401
	ErrForbidden             = errors.New("queuecore: forbidden")               // 403
	ErrNotFound              = errors.New("queuecore: not found")               // 404
	ErrConflict              = errors.New("queuecore: conflict")                // 409
	ErrAckRejected           = errors.New("queuecore: ack rejected")            // 409 ACK_REJECTED, and acks refused here
	ErrValidation            = errors.New("queuecore: invalid request")         // 400, 422
	ErrPayloadTooLarge       = errors.New("queuecore: payload too large")       // 413
	ErrRateLimited           = errors.New("queuecore: rate limited")            // 429
	ErrServer                = errors.New("queuecore: server error")            // 5xx
	ErrUnavailable           = errors.New("queuecore: unavailable")             // 503
	ErrPublishOutcomeUnknown = errors.New("queuecore: publish outcome unknown") // 503 PUBLISH_OUTCOME_UNKNOWN
	ErrConnection            = errors.New("queuecore: no answer")               // the network failed
	ErrTimeout               = errors.New("queuecore: timed out")               // no answer in time
	ErrLeaseExpired          = errors.New("queuecore: lease expired")           // held messages dropped
	ErrPushVerification      = errors.New("queuecore: push not verified")       // VerifyPush refused a request
)

// Is reports whether e is of the kind target names (one of the Err… values), so that
// errors.Is(err, queuecore.ErrRateLimited) reads a 429, whatever its code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrAckRejected:
		return e.Code == "ACK_REJECTED"
	case ErrValidation:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity
	case ErrPayloadTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests
	case ErrServer:
		return e.Status >= 500
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case ErrPublishOutcomeUnknown:
		return e.Code == "PUBLISH_OUTCOME_UNKNOWN"
	case ErrConnection:
		return e.Status == 0 && (e.Code == "CONNECTION_ERROR" || e.Code == "TIMEOUT")
	case ErrTimeout:
		return e.Code == "TIMEOUT"
	case ErrLeaseExpired:
		return e.Code == "LEASE_EXPIRED"
	case ErrPushVerification:
		return e.Code == "INVALID_PUSH_SIGNATURE" || e.Code == "STALE_PUSH_TIMESTAMP"
	}
	return false
}

// rejection is one error for the refused ids of a request of total ids.
func rejection(refused [][2]string, total int) *Error {
	first := "the lease ended"
	if len(refused) > 0 {
		first = refused[0][1]
	}
	list := make([]any, len(refused))
	for i, r := range refused {
		list[i] = map[string]any{"ackId": r[0], "reason": r[1]}
	}
	return &Error{Code: "ACK_REJECTED", Message: fmt.Sprintf("%d of %d refused: %s", len(refused), total, first),
		Status: http.StatusConflict, Body: map[string]any{"rejected": list}}
}
