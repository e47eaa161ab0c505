// Package clock owns the one wait that ends with its context: Sleep,
// which every bounded retry and poll loop of the module uses.
package clock
