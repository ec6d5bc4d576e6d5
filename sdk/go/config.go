package queuecore

import (
	"context"
	"net/url"
)

// Fairness is a fair group's deficit round robin: weights per fairness key (1-1000), the weight
// of other keys (DefaultWeight, 0: 1) and the quantum (each turn adds Quantum × weight, 0: 1).
type Fairness struct {
	Weights       map[string]int `json:"weights,omitempty"`
	DefaultWeight int            `json:"defaultWeight,omitempty"`
	Quantum       int            `json:"quantum,omitempty"`
}

// KeyStats is a fairness key of a fair group: its pending messages (in the look-ahead windows),
// deficit and weight.
type KeyStats struct {
	Key     string `json:"key"`
	Pending int64  `json:"pending"`
	Deficit int64  `json:"deficit"`
	Weight  int    `json:"weight"`
}

// ThrottleStats is a throttle key's token bucket: tokens now, refill rate, capacity.
type ThrottleStats struct {
	Key           string  `json:"key"`
	Tokens        float64 `json:"tokens"`
	RatePerSecond float64 `json:"ratePerSecond"`
	Burst         float64 `json:"burst"`
}

// GroupStats is a group's depth, in flight, consumers, fairness keys, throttle keys and hook
// failures.
type GroupStats struct {
	Depth              int64           `json:"depth"`
	InFlight           int64           `json:"inFlight"`
	ActiveConsumers    int             `json:"activeConsumers"`
	ActiveFairnessKeys int             `json:"activeFairnessKeys"`
	Quantum            int             `json:"quantum"`
	PerKey             []KeyStats      `json:"perKey"`
	PerThrottle        []ThrottleStats `json:"perThrottle"`
	HookErrors         int64           `json:"hookErrors"`
}

// Stats returns the group's stats.
func (s *Groups) Stats(ctx context.Context, topic, group string) (*GroupStats, error) {
	out := &GroupStats{}
	err := s.t.do(ctx, call{method: "GET", path: groupPath(topic, group, "stats"), idempotent: true}, out)
	return orNil(out, err)
}

// ConfigEntry is a key of the environment's runtime configuration and its value.
type ConfigEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// RuntimeConfig is the environment's runtime configuration (writes need the admin scope), such
// as throttle.<key>.rate and throttle.<key>.burst; every replica sees a change within seconds.
type RuntimeConfig struct{ t *transport }

// Set creates or replaces key.
func (s *RuntimeConfig) Set(ctx context.Context, key, value string) (*ConfigEntry, error) {
	out := &ConfigEntry{}
	c := call{method: "PUT", path: escapePath("config", key), body: map[string]string{"value": value}, idempotent: true}
	return orNil(out, s.t.do(ctx, c, out))
}

// Get returns the entry; a 404 CONFIG_KEY_NOT_FOUND *Error when it is not set.
func (s *RuntimeConfig) Get(ctx context.Context, key string) (*ConfigEntry, error) {
	out := &ConfigEntry{}
	c := call{method: "GET", path: escapePath("config", key), idempotent: true}
	return orNil(out, s.t.do(ctx, c, out))
}

// List returns the entries whose key starts with prefix, by key.
func (s *RuntimeConfig) List(ctx context.Context, prefix string) ([]ConfigEntry, error) {
	query := url.Values{}
	if prefix != "" {
		query.Set("prefix", prefix)
	}
	var out struct {
		Entries []ConfigEntry `json:"entries"`
	}
	c := call{method: "GET", path: escapePath("config"), query: query, idempotent: true}
	return out.Entries, s.t.do(ctx, c, &out)
}

// Delete removes key; a 404 *Error when it is not set.
func (s *RuntimeConfig) Delete(ctx context.Context, key string) error {
	return s.t.do(ctx, call{method: "DELETE", path: escapePath("config", key)}, nil)
}
