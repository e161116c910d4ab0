// Package event is leaselog's vocabulary: the event record every transition
// is written as, its types, kinds, outcomes and revoke modes, the reasons the
// daemon gives, and the record's binary encoding. It imports nothing of the
// project and no storage engine, so the packages that only speak of events
// (the state machine, the projection, the wire contract, the worker) link no
// Pebble; package eventlog stores these records and owns the keyspace.
package event
