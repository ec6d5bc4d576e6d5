package queuecore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
)

func groupPath(topic, group string, rest ...string) string {
	return escapePath(append([]string{"topics", topic, "groups", group}, rest...)...)
}

// Groups manages the consumer groups of a topic.
type Groups struct {
	t       *transport
	offsets *Offsets
}

// List returns the topic's groups; Consumers counts live members only.
func (s *Groups) List(ctx context.Context, topic string) ([]GroupSummary, error) {
	var out []GroupSummary
	c := call{method: "GET", path: escapePath("topics", topic, "groups"), idempotent: true}
	return out, s.t.do(ctx, c, &out)
}

// Describe returns members, partition owners, committed offsets, lag and settings.
func (s *Groups) Describe(ctx context.Context, topic, group string) (*Group, error) {
	out := &Group{}
	err := s.t.do(ctx, call{method: "GET", path: groupPath(topic, group), idempotent: true}, out)
	return orNil(out, err)
}

// Configure creates or changes a group (admin scope); zero settings keep their value.
//
// The API replaces a group's whole configuration, so the SDK reads it first and sends it
// back with the changes; two concurrent Configure calls may overwrite each other.
func (s *Groups) Configure(ctx context.Context, topic, group string, settings GroupSettings) (*Group, error) {
	current, err := s.currentConfig(ctx, topic, group)
	if err != nil {
		return nil, err
	}
	out := &Group{}
	body, err := mergedConfig(current, settings)
	if err != nil {
		return nil, err
	}
	err = s.t.do(ctx, call{method: "PUT", path: groupPath(topic, group), body: body, idempotent: true}, out)
	return orNil(out, err)
}

// Delete removes a group with its members and committed offsets (admin scope).
func (s *Groups) Delete(ctx context.Context, topic, group string) error {
	return s.t.do(ctx, call{method: "DELETE", path: groupPath(topic, group)}, nil)
}

// ResetOffsets moves every partition (no members allowed): see Offsets.Reset.
func (s *Groups) ResetOffsets(ctx context.Context, topic, group string, to ResetTo) ([]PartitionOffset, error) {
	return s.offsets.Reset(ctx, topic, group, to)
}

func (s *Groups) currentConfig(ctx context.Context, topic, group string) (map[string]any, error) {
	found, err := s.Describe(ctx, topic, group)
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Code == "GROUP_NOT_FOUND" {
		return map[string]any{}, nil
	}
	if err != nil {
		return nil, err
	}
	return found.Config, nil
}

func mergedConfig(current map[string]any, s GroupSettings) (map[string]any, error) {
	body := map[string]any{}
	for k, v := range current {
		if k != "push" { // what GET shows of push (its secret's hint) is not what PUT takes
			body[k] = v
		}
	}
	setIf(body, "startFrom", s.StartFrom, s.StartFrom != "")
	setIf(body, "ackTimeout", durationMs(s.AckTimeout), s.AckTimeout > 0)
	setIf(body, "maxInFlight", s.MaxInFlight, s.MaxInFlight > 0)
	setIf(body, "sessionTimeout", durationMs(s.SessionTimeout), s.SessionTimeout > 0)
	dead := map[string]any{}
	if known, ok := current["deadLetter"].(map[string]any); ok {
		for k, v := range known {
			dead[k] = v
		}
	}
	if p := s.DeadLetter; p != nil {
		setIf(dead, "maxRetries", p.MaxRetries, p.MaxRetries != nil)
		setIf(dead, "retryDelay", durationMs(p.RetryDelay), p.RetryDelay > 0)
		setIf(dead, "alertThreshold", p.AlertThreshold, p.AlertThreshold > 0)
	}
	body["deadLetter"] = dead
	delete(body, "fairness") // kept by the server unless given
	delete(body, "onFailure")
	setIf(body, "fairness", s.Fairness, s.Fairness != nil)
	setIf(body, "fairness", nil, s.FairnessOff)
	setIf(body, "onFailure", s.OnFailure, s.OnFailure != nil)
	setIf(body, "onFailure", nil, s.RemoveOnFailure)
	switch {
	case s.PushOff:
		body["push"] = nil
	case s.Push != nil:
		body["push"] = s.Push.wire(s.RotateSecret)
	case s.RotateSecret:
		shown, ok := current["push"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("queuecore: not a push group: give Push to rotate its secret")
		}
		push := map[string]any{"rotateSecret": true}
		for k, v := range shown {
			if k != "secretHint" {
				push[k] = v
			}
		}
		body["push"] = push
	}
	return body, nil
}

func setIf(m map[string]any, key string, value any, given bool) {
	if given {
		m[key] = value
	}
}

// Offsets reads and moves where a group is in each partition.
type Offsets struct{ t *transport }

// Get returns one partition's committed offset, end and lag.
func (s *Offsets) Get(ctx context.Context, topic, group string, partition int) (*PartitionOffset, error) {
	out := &PartitionOffset{}
	query := url.Values{"partition": {strconv.Itoa(partition)}}
	c := call{method: "GET", path: groupPath(topic, group, "offsets"), query: query, idempotent: true}
	if err := s.t.do(ctx, c, out); err != nil {
		return nil, err
	}
	out.Partition = partition
	return out, nil
}

// All returns every partition's committed offset, end and lag.
func (s *Offsets) All(ctx context.Context, topic, group string) ([]PartitionOffset, error) {
	var out struct {
		Partitions []PartitionOffset `json:"partitions"`
	}
	c := call{method: "GET", path: groupPath(topic, group, "offsets"), idempotent: true}
	return out.Partitions, s.t.do(ctx, c, &out)
}

// Seek delivers partition from offset on (admin scope); its in-flight leases are dropped.
func (s *Offsets) Seek(ctx context.Context, topic, group string, partition int, offset int64) (*PartitionOffset, error) {
	out := &PartitionOffset{}
	body := map[string]any{"partition": partition, "offset": offset}
	c := call{method: "POST", path: groupPath(topic, group, "offsets", "seek"), body: body, idempotent: true}
	if err := s.t.do(ctx, c, out); err != nil {
		return nil, err
	}
	out.Partition = partition
	return out, nil
}

// Reset moves every partition (admin scope); a 409 *Error while the group has members.
func (s *Offsets) Reset(ctx context.Context, topic, group string, to ResetTo) ([]PartitionOffset, error) {
	var out struct {
		Partitions []PartitionOffset `json:"partitions"`
	}
	body := map[string]any{"to": to.value}
	c := call{method: "POST", path: groupPath(topic, group, "offsets", "reset"), body: body, idempotent: true}
	return out.Partitions, s.t.do(ctx, c, &out)
}

// DLQ is a group's dead-letter queue: inspect (consume scope), replay (admin scope).
type DLQ struct{ t *transport }

// InspectOptions pages through a DLQ: Limit (default 100) entries after the message id After.
type InspectOptions struct {
	Limit int
	After string
}

// Inspect returns dead letters oldest first, with the queue's depth.
func (s *DLQ) Inspect(ctx context.Context, topic, group string, opts InspectOptions) (*DeadLetterPage, error) {
	query := url.Values{}
	if opts.Limit > 0 {
		query.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.After != "" {
		query.Set("after", opts.After)
	}
	out := &DeadLetterPage{}
	c := call{method: "GET", path: groupPath(topic, group, "dlq"), query: query, idempotent: true}
	return orNil(out, s.t.do(ctx, c, out))
}

// Replay delivers one dead letter to the group again, as attempt 1; returns 1.
func (s *DLQ) Replay(ctx context.Context, topic, group, messageID string) (int, error) {
	// Not retried after a lost answer: the repeat would be refused as already replayed.
	return s.replay(ctx, groupPath(topic, group, "dlq", messageID, "replay"), nil)
}

// ReplayAll delivers every dead letter to the group again; returns how many.
func (s *DLQ) ReplayAll(ctx context.Context, topic, group string) (int, error) {
	return s.replay(ctx, groupPath(topic, group, "dlq", "replay"), nil)
}

// ReplayCount delivers at most count dead letters to the group again, oldest first; returns how
// many.
func (s *DLQ) ReplayCount(ctx context.Context, topic, group string, count int) (int, error) {
	return s.replay(ctx, groupPath(topic, group, "dlq", "replay"), map[string]int{"count": count})
}

func (s *DLQ) replay(ctx context.Context, path string, body any) (int, error) {
	var out struct {
		Replayed int `json:"replayed"`
	}
	err := s.t.do(ctx, call{method: "POST", path: path, body: body}, &out)
	return out.Replayed, err
}
