package queuecore

import "context"

// Topics manages the topics of the API key's environment (admin scope).
type Topics struct{ t *transport }

// Create makes a topic; a 409 TOPIC_EXISTS *Error when the name is taken.
func (s *Topics) Create(ctx context.Context, config TopicConfig) (*Topic, error) {
	out := &Topic{}
	// Not idempotent: a create whose answer was lost would be refused as TOPIC_EXISTS.
	err := s.t.do(ctx, call{method: "POST", path: escapePath("topics"), body: config}, out)
	return orNil(out, err)
}

// List returns every active topic, by name.
func (s *Topics) List(ctx context.Context) ([]Topic, error) {
	var out struct {
		Topics []Topic `json:"topics"`
	}
	err := s.t.do(ctx, call{method: "GET", path: escapePath("topics"), idempotent: true}, &out)
	return out.Topics, err
}

// Describe returns one topic with its stats; a 404 TOPIC_NOT_FOUND *Error when missing.
func (s *Topics) Describe(ctx context.Context, name string) (*Topic, error) {
	out := &Topic{}
	err := s.t.do(ctx, call{method: "GET", path: escapePath("topics", name), idempotent: true}, out)
	return orNil(out, err)
}

// Update raises the partition count or changes retention or latency class, sets the onEnqueue
// hook or removes it (RemoveOnEnqueue).
func (s *Topics) Update(ctx context.Context, name string, update TopicUpdate) (*Topic, error) {
	out := &Topic{}
	var body any = update
	if update.RemoveOnEnqueue {
		body = map[string]any{
			"partitions": omitZero(update.Partitions), "retention": omitEmpty(update.Retention),
			"latencyClass": omitEmpty(update.LatencyClass), "onEnqueue": nil,
		}
		body = withoutAbsent(body.(map[string]any))
	}
	c := call{method: "PATCH", path: escapePath("topics", name), body: body, idempotent: true}
	return orNil(out, s.t.do(ctx, c, out))
}

// Delete removes a topic: its name is free at once, its data is removed in the background.
func (s *Topics) Delete(ctx context.Context, name string) (*Topic, error) {
	out := &Topic{}
	// Not retried after a lost answer: the repeat would report the deleted topic as missing.
	err := s.t.do(ctx, call{method: "DELETE", path: escapePath("topics", name)}, out)
	return orNil(out, err)
}

type absent struct{}

func omitZero(n int) any {
	if n == 0 {
		return absent{}
	}
	return n
}

func omitEmpty(s string) any {
	if s == "" {
		return absent{}
	}
	return s
}

func withoutAbsent(m map[string]any) map[string]any {
	for k, v := range m {
		if _, gone := v.(absent); gone {
			delete(m, k)
		}
	}
	return m
}

func orNil[T any](value *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return value, nil
}
