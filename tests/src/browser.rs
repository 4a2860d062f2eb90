//! Headless Chromium for the status page's tests and P17: Debian's `chromium` driven through `chromedriver`
//! (WebDriver) by fantoccini. `scripts/install-chromium.sh` installs both (scripts/test.sh runs it); without
//! them a test fails saying so, it never passes silently. chromedriver runs in a process group of its own with a
//! fresh profile directory, and the group (chromedriver and the Chromium it started) is killed by its id when
//! the `Browser` is dropped, should the session not have been closed.

use crate::{poll_async, Proc};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

pub struct Browser {
    pub client: Client,
    driver: Proc,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium session through it.
    pub async fn start() -> Browser {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(bin).is_file(),
                "{bin} is missing: the status page's browser tests need Debian's chromium and chromium-driver; \
                 run scripts/install-chromium.sh (as root; scripts/test.sh does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}")).arg("--allowed-ips=127.0.0.1").process_group(0);
        let mut driver = Proc::spawn("chromedriver", cmd);
        driver.wait_for_line("was started successfully");
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), json!({ "binary": CHROMIUM, "args": args }));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("starting {CHROMIUM} through chromedriver: {e}\n{}", driver.output.text()));
        Browser { client, driver, _profile: profile }
    }

    /// Ends the session (Chromium exits) and chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns what it returns.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|e| panic!("running {script:?} in the page: {e}"))
    }

    /// Waits until `script` returns something other than null/false/undefined, and returns that.
    pub async fn until(&self, what: &str, script: &str) -> Value {
        poll_async(what, || async {
            let v = self.client.execute(script, vec![]).await.ok()?;
            (!v.is_null() && v != Value::Bool(false)).then_some(v)
        })
        .await
    }

    /// The text of the first element `css` finds, or `None` when there is none.
    pub async fn text(&self, css: &str) -> Option<String> {
        let el = self.client.find(Locator::Css(css)).await.ok()?;
        el.text().await.ok()
    }

    /// Clicks the first element `css` finds (which must be there).
    pub async fn click(&self, css: &str) {
        let el = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css} on the page: {e}"));
        el.click().await.unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    /// Types `text` into the first element `css` finds.
    pub async fn type_into(&self, css: &str, text: &str) {
        let el = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css} on the page: {e}"));
        el.send_keys(text).await.unwrap_or_else(|e| panic!("typing into {css}: {e}"));
    }

    /// Saves a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The group chromedriver leads: Chromium and its helpers too, even when the session was not closed.
        let _ = Command::new("kill").arg("-KILL").arg("--").arg(format!("-{}", self.driver.pid())).status();
    }
}
