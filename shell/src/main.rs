//! `jaque`: the production binary. Adapters only — it turns I/O into `jaque-core` inputs and the core's
//! outputs into I/O. This file composes them: a folder per role (`engine`, `ui`, `sink`, `notifier`,
//! `worker`) over the shared plumbing (`follow`, `coord`, `nats`, `http`); `docs/shell.md` maps the tree, the
//! README has the flags, topologies, API and metrics.

mod cli;
mod client;
mod clock;
mod coord;
mod engine;
mod follow;
mod http;
mod metrics;
mod nats;
mod notifier;
mod process;
mod sink;
mod ui;
mod worker;

use clap::Parser;
use cli::{Address, Config};
use coord::{Coordination, DataDir, NatsCoord};
use engine::{EngineLoop, WorkQueue};
use follow::RoleHandle;
use jaque_core::sink::SinkConfig;
use jaque_core::ui::{write_route, WriteRoute};
use jaque_core::{EngineConfig, MemberRef};
use sink::store::Store;
use sink::SinkLoop;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if client::is_client_command(&argv) {
        return client::main(argv);
    }
    let argv = cli::normalize_args(argv);
    let args = match cli::Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let cfg = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jaque: error: {e}");
            return ExitCode::from(2);
        }
    };
    // jaque's own events at -log-level; its dependencies' at most at debug: at trace the NATS client prints every
    // message it reads, log entries with their probes' credentials included.
    let levels = tracing_subscriber::filter::Targets::new()
        .with_default(cfg.log_level.min(tracing::Level::DEBUG))
        .with_target("jaque", cfg.log_level);
    let layer =
        tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    if cfg.log_json {
        tracing_subscriber::registry().with(levels).with(layer.json()).init();
    } else {
        tracing_subscriber::registry().with(levels).with(layer).init();
    }
    // Before anything starts, like a configuration error: a directory that cannot be used, one another process
    // holds, or files that are damaged (not merely cut short by a crash).
    let data_dir = match cfg.data_dir.as_deref().map(DataDir::open).transpose() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("jaque: error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jaque: error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cfg, data_dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = nats::explain(&e);
            tracing::error!("{e}");
            eprintln!("jaque: error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cfg: Config, data_dir: Option<DataDir>) -> Result<(), String> {
    let incarnation = clock::now().as_millis();
    let me = MemberRef { id: cfg.id.clone(), incarnation };
    let mut engine_cfg = EngineConfig::new(me.clone(), cfg.ttl);
    engine_cfg.forwarding = cfg.coordination.is_nats();
    engine_cfg.idempotency_window = cfg.idempotency_window;
    engine_cfg.hold_format = cfg.hold_format;
    engine_cfg.snapshots = cfg.snapshots.clone();
    engine_cfg.check_batching = cfg.check_batching;
    tracing::info!(
        member = %me,
        engine = cfg.roles.engine,
        worker = cfg.roles.worker,
        ui = cfg.roles.ui,
        notifier = cfg.roles.notifier,
        sink = cfg.roles.sink,
        sink_store = ?cfg.sink_store,
        coordination = ?cfg.coordination,
        data_dir = ?cfg.data_dir,
        queue = ?cfg.queue,
        ttl = ?cfg.ttl,
        "starting"
    );

    // Bind first: a taken port fails before anything joins the cluster.
    let listener =
        tokio::net::TcpListener::bind(cfg.listen).await.map_err(|e| format!("-listen {}: {e}", cfg.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;

    let name = format!("jaque {me}");
    let needs_coordination = cfg.roles.engine || cfg.roles.ui || cfg.roles.notifier || cfg.roles.sink;
    let ping = nats::ping_interval(cfg.ttl);
    let coord_link = match &cfg.coordination {
        Address::Nats(url) if needs_coordination => Some(nats::connect(url, &cfg.nats, &name, ping).await?),
        _ => None,
    };
    let coord = match &coord_link {
        Some(link) => {
            Coordination::Nats(Box::new(NatsCoord::open(link.clone(), cfg.log_replicas, cfg.roles.engine).await?))
        }
        None => match data_dir {
            Some(data) => Coordination::memory_on(data),
            None => Coordination::memory(),
        },
    };
    let queue_link = match &cfg.queue {
        Some(Address::Nats(url)) if cfg.roles.engine || cfg.roles.worker => match &coord_link {
            Some(link) if &link.url == url => Some(link.clone()),
            _ => Some(nats::connect(url, &cfg.nats, &name, ping).await?),
        },
        _ => None,
    };

    let (shutdown_tx, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received, shutting down");
        let _ = shutdown_tx.send(true);
    });

    let mut tasks = tokio::task::JoinSet::new();

    // Worker: in memory it is fed by the engine of this same process.
    let mut mem_queue = None;
    if cfg.roles.worker {
        let prober = worker::Prober::new(cfg.plugin_dir.clone())?;
        let concurrency = cfg.worker_concurrency;
        match &queue_link {
            Some(link) => {
                let (link, shutdown) = (link.clone(), shutdown.clone());
                tasks.spawn(async move { worker::serve_nats(prober, link, concurrency, shutdown).await });
            }
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                mem_queue = Some(tx);
                tasks.spawn(async move {
                    worker::serve_memory(prober, rx, concurrency).await;
                    Ok(())
                });
            }
        }
    }

    let (ui_tx, ui_rx) = mpsc::channel(256);
    let mut backend = None;
    // The status page's live feed, from whichever loop holds the log.
    let changes = cfg.roles.ui.then(|| ui::Changes::new(shutdown.clone()));
    let feed = changes.clone().map(ui::Feed::new);
    let mut owners = None;
    // Roles that leave a bucket on the signal and return once they have: waited for before the process exits.
    let mut leavers = tokio::task::JoinSet::new();
    if cfg.roles.engine {
        let queue = match (&queue_link, mem_queue) {
            (Some(link), _) => WorkQueue::Nats(link.clone()),
            (None, Some(tx)) => WorkQueue::Memory(tx),
            (None, None) => return Err("internal: -queue memory without a worker in this process".into()),
        };
        let mut engine =
            EngineLoop::new(engine_cfg.clone(), coord.clone(), coord_link.clone(), queue, shutdown.clone());
        if let Some(feed) = feed {
            engine = engine.with_feed(feed);
        }
        leavers.spawn(async move { engine.run(ui_rx).await });
        backend = Some(ui::Backend(ui_tx));
    } else if cfg.roles.ui {
        let coord = coord.clone();
        let (owners_tx, owners_rx) = watch::channel(ui::reader::InForce::default());
        owners = Some(owners_rx);
        let feed = feed.ok_or("internal: a ui without its feed")?;
        tasks.spawn(async move { ui::reader::run_reader(coord, ui_rx, owners_tx, feed).await });
        backend = Some(ui::Backend(ui_tx));
    }

    let mut roles = Vec::new();
    if let Some(notify) = &cfg.notify {
        let ncfg = notifier::NotifierConfigShell {
            me: me.clone(),
            ttl: cfg.ttl,
            urls: notify.urls.clone(),
            secret: notify.secret.clone(),
            give_up: notify.give_up,
            expose_members: backend.is_none(),
        };
        let (handle, queries) = RoleHandle::new("notifier");
        roles.push(handle);
        let nloop = notifier::NotifierLoop::new(ncfg, coord.clone(), queries, shutdown.clone())?;
        leavers.spawn(nloop.run());
    }

    // The sink's store, shared with the ui's history API in this process.
    let store = cfg.sink_store.as_ref().map(|url| Arc::new(Store::open(url)));
    if let (true, Some(store)) = (cfg.roles.sink, &store) {
        let (handle, queries) = RoleHandle::new("sink");
        roles.push(handle);
        // The engine's or ui's loop already exposes the live members of every bucket.
        let expose_buckets = !(cfg.roles.engine || cfg.roles.ui || cfg.roles.notifier);
        let sink = SinkLoop::new(
            SinkConfig::new(me.clone(), cfg.ttl),
            store.clone(),
            coord.clone(),
            queries,
            shutdown.clone(),
            expose_buckets,
        );
        leavers.spawn(sink.run());
    }

    // Where writes go (`jaque_core::ui::write_route`), and what went where.
    let route = write_route(cfg.roles.engine, coord.is_nats());
    let writes = Arc::new(ui::Writes::default());
    let api = match cfg.roles.ui {
        true => Some(Arc::new(ui::Api {
            backend: backend.clone(),
            route,
            ingress: coord_link.clone(),
            owners,
            to_owner: cfg.ui_writes_to_owner,
            writes: writes.clone(),
            submit: cfg.submit,
            // A ui that submits writes over NATS hears each one's claim and outcome on the process's inbox.
            inbox: match (&coord_link, route) {
                (Some(link), WriteRoute::Ingress) => Some(ui::Inbox::open(&link.client).await?),
                _ => None,
            },
            tokens: cfg.tokens.clone(),
            id_prefix: format!("{}-{}", me.id, me.incarnation),
            next_id: AtomicU64::new(0),
            engine_cfg,
            history: store.clone(),
            changes: changes.clone(),
        })),
        false => None,
    };
    let parts = Arc::new(process::Parts {
        backend,
        roles,
        worker: cfg.roles.worker,
        writes: (route == WriteRoute::Ingress).then_some(writes),
        changes,
    });
    let tokens = Arc::new(cfg.tokens.clone());
    let app = process::router(parts, api);
    let app = http::serve::layers(app).layer(axum::middleware::from_fn_with_state(tokens, http::guard::guard));
    tasks.spawn(http::serve::run(listener, cfg.tls.clone(), app, shutdown.clone()));
    tracing::info!(%addr, tls = cfg.tls.is_some(), "listening");

    let mut shutdown = shutdown;
    if leavers.is_empty() {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => {}
            Some(r) = tasks.join_next() => r.map_err(|e| e.to_string())??,
        }
    } else {
        // An engine or sink leaves its bucket on the signal and returns once its key is deleted. Wait for every
        // one even when another task ends first (the http server stops at once on the signal): returning early
        // would drop the NATS connection under it before the delete reached the store, and the others would
        // wait for the ttl instead. A task failing still ends the process.
        while !leavers.is_empty() {
            tokio::select! {
                Some(r) = leavers.join_next() => r.map_err(|e| e.to_string())??,
                Some(r) = tasks.join_next() => r.map_err(|e| e.to_string())??,
            }
        }
    }
    // What is left winds down by itself after the signal (the http server, a worker finishing the checks it
    // took, the ui's reader); a bound keeps a stuck probe from holding the exit.
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(10), async { while tasks.join_next().await.is_some() {} })
            .await;
    coord.close().await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
