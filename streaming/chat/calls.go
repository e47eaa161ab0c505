package chat

// callKey is how Chat keys a tool call, in the decoder and the call filter
// alike: by its choice and its tool_calls index, which need not start at 0.
type callKey struct{ choice, index int }

func (k callKey) key() callKey { return k }

type keyed interface{ key() callKey }

// locate finds the call a tool_calls element (or, legacy, a function_call
// object) belongs to: at is its position in calls, -1 when the element
// starts a call, which then takes key. An element with an index belongs to
// the call of its index; one without starts the choice's next call when it
// has an id, else continues the choice's latest; a function_call is its
// choice's call 0.
func locate[C keyed](calls []C, choice int, legacy bool, index int, indexed, hasID bool) (at, key int) {
	switch {
	case legacy:
		return find(calls, callKey{choice, 0}), 0
	case indexed:
		return find(calls, callKey{choice, index}), index
	case hasID:
		next := 0
		for _, c := range calls {
			if k := c.key(); k.choice == choice && k.index >= next {
				next = k.index + 1
			}
		}
		return -1, next
	}
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].key().choice == choice {
			return i, 0
		}
	}
	return -1, 0
}

// find is the position of the latest call keyed k, -1 when none.
func find[C keyed](calls []C, k callKey) int {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].key() == k {
			return i
		}
	}
	return -1
}
