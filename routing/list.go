package routing

// list is a FIFO threaded through its elements (an intrusive list): an
// element holds its links for each kind of list it can be in, so that it
// sits in several lists at once (an idle slot in the global deque and its
// node's; a waiter in all waiters and its home's) and leaves one in O(1)
// without an allocation. The zero list of a kind is empty. Guarded by
// State.mu, as its elements are.
type list[E any, P linked[E]] struct {
	kind       int
	head, tail P
	len        int
}

// linked is a pointer to an element of lists: its links in the list of
// each kind.
type linked[E any] interface {
	*E
	link(kind int) *listLink[E]
}

// listLink is an element's place in one list.
type listLink[E any] struct{ prev, next *E }

func (l *list[E, P]) pushBack(e P) {
	lk := e.link(l.kind)
	lk.prev, lk.next = l.tail, nil
	if l.tail != nil {
		l.tail.link(l.kind).next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.len++
}

func (l *list[E, P]) pushFront(e P) { l.insertBefore(e, l.head) }

// insertBefore puts e before at, or at the tail when at is nil.
func (l *list[E, P]) insertBefore(e, at P) {
	if at == nil {
		l.pushBack(e)
		return
	}
	lk, ak := e.link(l.kind), at.link(l.kind)
	lk.prev, lk.next = ak.prev, at
	if ak.prev != nil {
		P(ak.prev).link(l.kind).next = e
	} else {
		l.head = e
	}
	ak.prev = e
	l.len++
}

func (l *list[E, P]) remove(e P) {
	lk := e.link(l.kind)
	if lk.prev != nil {
		P(lk.prev).link(l.kind).next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		P(lk.next).link(l.kind).prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	lk.prev, lk.next = nil, nil
	l.len--
}
