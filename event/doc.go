// Package event is leaselog's vocabulary: the record every transition is
// written as ([Event]), its types ([Type], docs/design.md §3), kinds,
// outcomes and revoke modes, the reasons the daemon gives, and the record's
// binary encoding ([AppendRecord], [Decode]). It imports nothing of the
// project and no storage engine, so that the state machine and the
// projection link no Pebble; package eventlog stores these records and owns
// the keyspace. The wire contract, package api, has documents of its own.
package event
