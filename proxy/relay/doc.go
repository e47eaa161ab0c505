// Package relay owns the hop between gatekeeper and a provider on a
// model call: the one list of hop-by-hop headers that never cross it (in
// either direction), and the copy loop that hands a reply to the agent
// (its headers, its status, then its body written and flushed at once
// each time its source yields, so that every server-sent event reaches
// the agent as soon as it is whole), and the pool of buffers replies are
// read and copied with. A reply the provider compressed is decoded
// before it gets here (proxy/internal/coding): relay stays on the
// standard library.
//
// What the agent gets of a reply (which events, filtered how, held how
// long) is decided by the reply's Source, which the proxy builds per turn;
// relay only moves bytes and says which side failed.
package relay
