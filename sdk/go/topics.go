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

// Update raises the partition count or changes retention or latency class.
func (s *Topics) Update(ctx context.Context, name string, update TopicUpdate) (*Topic, error) {
	out := &Topic{}
	c := call{method: "PATCH", path: escapePath("topics", name), body: update, idempotent: true}
	return orNil(out, s.t.do(ctx, c, out))
}

// Delete removes a topic: its name is free at once, its data is removed in the background.
func (s *Topics) Delete(ctx context.Context, name string) (*Topic, error) {
	out := &Topic{}
	// Not retried after a lost answer: the repeat would report the deleted topic as missing.
	err := s.t.do(ctx, call{method: "DELETE", path: escapePath("topics", name)}, out)
	return orNil(out, err)
}

func orNil[T any](value *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return value, nil
}
