package queuecore

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"
)

// Message is a message leased to this consumer: settle it with Ack or Nack.
type Message struct {
	ID        string
	Topic     string
	Partition int
	Offset    int64
	Data      json.RawMessage // the JSON value exactly as published
	Key       *string
	Headers   map[string]string
	Timestamp time.Time
	Attempt   int
	AckID     string
	// Encoding is "base64" when Data is the base64 (a JSON string) of a value a Kafka client
	// produced that was not JSON; empty otherwise.
	Encoding string

	consumer *Consumer
	memberID string
	settled  atomic.Bool
}

type messageWire struct {
	ID        string            `json:"id"`
	MessageID string            `json:"messageId"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Data      json.RawMessage   `json:"data"`
	Key       *string           `json:"key"`
	Headers   map[string]string `json:"headers"`
	Timestamp time.Time         `json:"timestamp"`
	Attempt   int               `json:"attempt"`
	AckID     string            `json:"ackId"`
	Encoding  string            `json:"encoding"`
}

func decodeMessage(raw []byte, consumer *Consumer, memberID string) (*Message, error) {
	var w messageWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, err
	}
	id := w.MessageID
	if id == "" {
		id = w.ID
	}
	return &Message{
		ID: id, Topic: w.Topic, Partition: w.Partition, Offset: w.Offset, Data: w.Data, Key: w.Key,
		Headers: w.Headers, Timestamp: w.Timestamp, Attempt: w.Attempt, AckID: w.AckID,
		Encoding: w.Encoding, consumer: consumer, memberID: memberID,
	}, nil
}

// Decode unmarshals the message's data into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Data, v) }

// Settled reports whether the message was acked or nacked through this value.
func (m *Message) Settled() bool { return m.settled.Load() }

// Ack marks the message done; a 409 ACK_REJECTED *Error when its lease expired or was superseded.
func (m *Message) Ack(ctx context.Context) error {
	if _, err := m.consumer.AckIDs(ctx, []string{m.AckID}); err != nil {
		return err
	}
	m.settled.Store(true)
	return nil
}

// Nack fails the message with an error text: it is retried after the group's retry delay
// (doubled per attempt) or dead-lettered; deadLettered tells which.
func (m *Message) Nack(ctx context.Context, reason string) (deadLettered bool, err error) {
	return m.NackAfter(ctx, reason, 0)
}

// NackAfter is Nack with this retry's own base delay (0 keeps the group's).
func (m *Message) NackAfter(ctx context.Context, reason string, retryDelay time.Duration) (bool, error) {
	dead, err := m.consumer.nack(ctx, m.AckID, reason, retryDelay)
	if err == nil {
		m.settled.Store(true)
	}
	return dead, err
}

// Extend keeps the lease for d from now (whole seconds); false when it had already ended.
func (m *Message) Extend(ctx context.Context, d time.Duration) (bool, error) {
	extended, err := m.consumer.ExtendIDs(ctx, []string{m.AckID}, d)
	return len(extended) == 1 && extended[0] == m.AckID, err
}
