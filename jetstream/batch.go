package jetstream

import (
	"encoding/binary"
	"fmt"

	"github.com/leaselog/leaselog/event"
)

// A batch is one message of the stream: the events one Stage numbered, in
// the log's own record encoding, so that the stream holds exactly what the
// log does:
//
//	uvarint(seq of the first event) ‖ (uvarint(len) ‖ record)…
//
// A record's checksum is bound to its sequence number, which the message
// carries once: event i of the batch is first+i.

func encodeBatch(evs []event.Event) []byte {
	var b []byte
	b = binary.AppendUvarint(b, evs[0].Seq)
	var rec []byte
	for i := range evs {
		rec = event.AppendRecord(rec[:0], &evs[i])
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

// decodeBatch decodes a message into events that share no memory with data.
// A message leaselog could not have written is event.ErrCorrupt.
func decodeBatch(data []byte) ([]event.Event, error) {
	first, n := binary.Uvarint(data)
	if n <= 0 || first == 0 {
		return nil, fmt.Errorf("%w: batch message without a first sequence number", event.ErrCorrupt)
	}
	data = data[n:]
	var evs []event.Event
	for seq := first; len(data) > 0; seq++ {
		l, n := binary.Uvarint(data)
		if n <= 0 || l > uint64(len(data)-n) {
			return nil, fmt.Errorf("%w: batch message at seq %d: bad record length", event.ErrCorrupt, seq)
		}
		e, err := event.Decode(seq, data[n:n+int(l)])
		if err != nil {
			return nil, err
		}
		evs = append(evs, e)
		data = data[n+int(l):]
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%w: batch message at seq %d holds no event", event.ErrCorrupt, first)
	}
	return evs, nil
}

// The cache's marker (eventlog's replica marker) is the stream sequence of
// the last message it holds, big-endian.

func marker(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func parseMarker(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: replica marker of %d bytes, want 8", event.ErrCorrupt, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
