// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain), built from its
// module: `go install go.etcd.io/etcd/server/v3@version` refuses it because its go.mod has
// replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
