package natsagent

import "container/list"

// lru is a bounded map that forgets its oldest entries first. Not safe for
// concurrent use: Server.mu guards it.
type lru[V any] struct {
	max   int
	order *list.List // of keys, oldest at the front
	items map[string]lruItem[V]
}

type lruItem[V any] struct {
	v V
	e *list.Element
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), items: make(map[string]lruItem[V])}
}

func (l *lru[V]) get(k string) V {
	return l.items[k].v
}

func (l *lru[V]) put(k string, v V) {
	if it, ok := l.items[k]; ok {
		l.order.MoveToBack(it.e)
		l.items[k] = lruItem[V]{v: v, e: it.e}
		return
	}
	l.items[k] = lruItem[V]{v: v, e: l.order.PushBack(k)}
	for len(l.items) > l.max {
		front := l.order.Front()
		l.order.Remove(front)
		delete(l.items, front.Value.(string))
	}
}

func (l *lru[V]) remove(k string) {
	if it, ok := l.items[k]; ok {
		l.order.Remove(it.e)
		delete(l.items, k)
	}
}
