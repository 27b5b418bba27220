module perfinsp

go 1.26.0

require (
	github.com/go-delve/delve v1.27.2
	github.com/google/pprof v0.0.0-20261016150608-1facf8f91b50
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/ulikunitz/xz v0.5.15
	github.com/urfave/cli/v2 v2.27.7
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
)
