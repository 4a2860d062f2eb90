//! A nats-server cluster on loopback: `n` nodes, each with its own `server_name`, client and route ports, store
//! directory and a route to every other node, JetStream on each. Nodes can be killed (SIGKILL), stopped and
//! continued (SIGSTOP/SIGCONT) and restarted with the same configuration and store. Every process is started
//! here and killed by its own PID on drop.

use crate::{nats_server_bin, poll, Output, Proc};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

pub struct Node {
    pub name: String,
    pub url: String,
    conf: PathBuf,
    /// What earlier runs of this node printed (each run has its own output, so waiting for a line of a restart
    /// does not find the first run's).
    earlier: String,
    pub proc: Option<Proc>,
}

pub struct NatsCluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// `n` distinct ports that were free a moment ago (the servers bind them right after; loopback only). Every
/// listener is held until all are chosen: released one by one, the kernel may hand the same port out twice.
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("a free loopback port")).collect();
    held.iter().map(|l| l.local_addr().expect("a bound listener has an address").port()).collect()
}

/// How many times `start` picks new ports when a node lost one of its ports to another process.
const START_ATTEMPTS: usize = 5;

impl NatsCluster {
    /// Starts `n` nodes and waits until JetStream has a meta leader (streams can be created). A port taken by
    /// another process between its choice and its bind (other tests start servers at the same time) makes that
    /// node exit at once: then the whole cluster starts again on new ports.
    pub fn start(n: usize) -> NatsCluster {
        for attempt in 1..=START_ATTEMPTS {
            let mut c = NatsCluster::configure(n);
            for i in 0..n {
                c.spawn(i);
            }
            // The route port is bound last, after "Server is ready": its line shows that both ports were had.
            let lost_port = (0..n).find(|&i| {
                let proc = c.nodes[i].proc.as_mut().expect("started");
                proc.wait_for_line_or_exit("Listening for route connections on").is_none()
                    && proc.output.text().contains("address already in use")
            });
            if let Some(i) = lost_port {
                eprintln!(
                    "nats cluster: {} lost a port to another process (attempt {attempt}); new ports",
                    c.nodes[i].name
                );
                continue;
            }
            for i in 0..n {
                c.wait_ready(i);
            }
            c.wait_meta_leader();
            return c;
        }
        panic!("a {n}-node nats cluster could not bind its ports in {START_ATTEMPTS} attempts");
    }

    /// The nodes' configurations on fresh ports, nothing started.
    fn configure(n: usize) -> NatsCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let picked = free_ports(2 * n);
        let ports: Vec<(u16, u16)> = picked.chunks(2).map(|p| (p[0], p[1])).collect();
        let mut nodes = Vec::new();
        for (i, (client, route)) in ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, r))| format!("\"nats-route://127.0.0.1:{r}\""))
                .collect();
            let store = dir.path().join(&name);
            let conf = dir.path().join(format!("{name}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "server_name: {name}\nlisten: \"127.0.0.1:{client}\"\n\
                     jetstream {{ store_dir: \"{}\" }}\n\
                     cluster {{ name: jaque, listen: \"127.0.0.1:{route}\", routes: [{}] }}\n",
                    store.display(),
                    routes.join(", ")
                ),
            )
            .expect("writing a node's config");
            let url = format!("nats://127.0.0.1:{client}");
            nodes.push(Node { name, url, conf, earlier: String::new(), proc: None });
        }
        NatsCluster { nodes, _dir: dir }
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let mut cmd = Command::new(nats_server_bin());
        cmd.arg("-c").arg(&node.conf);
        node.proc = Some(Proc::spawn_into(&format!("nats-{}", node.name), cmd, Output::default()));
    }

    fn wait_ready(&mut self, i: usize) {
        let proc = self.nodes[i].proc.as_mut().expect("started");
        proc.wait_for_line("Server is ready");
    }

    /// Every node's client URL, comma-separated, as `-coordination` takes a cluster.
    pub fn urls(&self) -> String {
        self.nodes.iter().map(|n| n.url.as_str()).collect::<Vec<_>>().join(",")
    }

    pub fn url(&self, i: usize) -> &str {
        &self.nodes[i].url
    }

    pub fn index_of(&self, name: &str) -> usize {
        self.nodes.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no node {name}"))
    }

    /// The URL of a node that is up (to read the log from, say).
    pub fn live_url(&self) -> &str {
        self.nodes.iter().find(|n| n.proc.is_some()).map(|n| n.url.as_str()).expect("a node is up")
    }

    /// SIGKILL, and waits for the exit.
    pub fn kill(&mut self, i: usize) {
        let mut proc = self.nodes[i].proc.take().expect("the node is up");
        proc.signal("KILL");
        proc.wait_exit();
        self.nodes[i].earlier.push_str(&proc.output.text());
    }

    /// Starts a killed node again with its configuration and store.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].proc.is_none(), "node {} is still up", self.nodes[i].name);
        self.spawn(i);
        self.wait_ready(i);
    }

    pub fn signal(&self, i: usize, sig: &str) {
        self.nodes[i].proc.as_ref().expect("the node is up").signal(sig);
    }

    /// Runs `f` with a JetStream context on a live node.
    fn with_js<T>(&self, f: impl AsyncFnOnce(async_nats::jetstream::Context) -> Option<T>) -> Option<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let url = self.live_url().to_string();
        rt.block_on(async move {
            let client =
                tokio::time::timeout(std::time::Duration::from_secs(5), async_nats::connect(url)).await.ok()?.ok()?;
            f(async_nats::jetstream::new(client)).await
        })
    }

    fn wait_meta_leader(&self) {
        poll("the JetStream cluster to elect a meta leader", || {
            self.with_js(async |js| js.query_account().await.ok().map(|_| ()))
        });
    }

    /// The server name of the node leading `stream`, once it has one.
    pub fn stream_leader(&self, stream: &str) -> String {
        poll(&format!("a leader for stream {stream}"), || {
            self.with_js(async |js| {
                let mut s = js.get_stream(stream).await.ok()?;
                let info = s.info().await.ok()?;
                info.cluster.as_ref()?.leader.clone()
            })
        })
    }

    /// Waits until `stream` has a leader and every replica is current: a node that was stopped and continued,
    /// or restarted, has caught up and the cluster answers for the stream again.
    pub fn wait_stream_current(&self, stream: &str) {
        poll(&format!("every replica of stream {stream} current"), || {
            self.with_js(async |js| {
                let mut s = js.get_stream(stream).await.ok()?;
                let info = s.info().await.ok()?;
                let cluster = info.cluster.as_ref()?;
                let replicas = &cluster.replicas;
                (cluster.leader.is_some()
                    && replicas.len() + 1 == info.config.num_replicas
                    && replicas.iter().all(|r| r.current && !r.offline))
                .then_some(())
            })
        })
    }

    /// The replicas `stream` was created with.
    pub fn stream_replicas(&self, stream: &str) -> usize {
        poll(&format!("stream {stream} info"), || {
            self.with_js(async |js| Some(js.get_stream(stream).await.ok()?.cached_info().config.num_replicas))
        })
    }

    /// What every node printed so far, for a failing test's report.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let now = n.proc.as_ref().map(|p| p.output.text()).unwrap_or_default();
                format!("---- {} ----\n{}{now}", n.name, n.earlier)
            })
            .collect()
    }
}
