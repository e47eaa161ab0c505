//go:build !unix

package conncap

func openFiles() uint64 { return 0 }
