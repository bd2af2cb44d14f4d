// Command cert-manager runs the subset of cert-manager's controllers that issue Certificates
// from SelfSigned and CA Issuers (issue 31: cert-manager as a certificate source), built from the
// published github.com/cert-manager/cert-manager module by hack/build-cert-manager.sh.
//
// Why a main of our own: upstream's binaries live in nested modules whose module path is not
// their directory (cmd/controller/go.mod is `github.com/cert-manager/cert-manager/controller-binary`
// with a `replace ../../`), so the Go module proxy serves none of them. The root module's public
// pkg/ packages are served, and they hold every controller: each registers itself with
// controller.Register in init(), and controller.NewContextFactory takes only public types. What
// this main leaves out: the webhook (validation and defaulting only: the CRDs have one version and
// no conversion), leader election (run one replica), metrics and healthz, ACME and the other
// issuers. Upstream's own defaults (QPS, burst, backoff, workers) are set here by hand, because
// its configuration types are internal/.
//
// pkg/controller is not a stable Go API: expect small fixes on each bump of the module, and a
// renamed controller fails at start ("is not registered"), not at build time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	// Each of these registers its controller with controller.Register in init().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// Issuer back ends used by the (cluster)issuers readiness controllers.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers lists what runs; "clusterissuers" only without --namespace.
var controllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig path; empty means in-cluster config")
	namespace := flag.String("namespace", "", "watch only this namespace (ClusterIssuers off); empty means the whole cluster")
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager", "namespace holding ClusterIssuer secrets (cluster scope only)")
	workers := flag.Int("workers", 5, "workers per controller")
	klog.InitFlags(flag.CommandLine) // -v=N
	flag.Parse()

	logf.InitLogs()
	defer logf.FlushLogs()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")

	if err := run(ctx, *kubeconfig, *namespace, *clusterNS, *workers); err != nil {
		logf.Log.Error(err, "exiting")
		logf.FlushLogs()
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace, clusterNS string, workers int) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterNS},
		CertificateOptions: controller.CertificateOptions{
			// upstream defaults for failed-request retry backoff
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}

	names := controllers
	if namespace == "" {
		names = append(names, "clusterissuers")
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range names {
		newController, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := newController(factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		g.Go(func() error { return c.Run(workers, gctx) })
	}
	logf.Log.Info("started controllers", "controllers", names, "namespace", namespace)

	// Informers are requested by the constructors above; start them afterwards.
	base.SharedInformerFactory.Start(gctx.Done())
	base.KubeSharedInformerFactory.Start(gctx.Done())

	err = g.Wait()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
