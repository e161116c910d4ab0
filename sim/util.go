package sim

import (
	"cmp"
	"slices"
)

// sortedKeys returns m's keys in order: the simulation never ranges over a
// map, whose order would make a run irreproducible.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
