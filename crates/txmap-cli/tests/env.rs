//! `txmap env`: the named regions of an environment (issue 19 point 1),
//! listed while a process still holds a commit that created one only in
//! the log.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use cmd::*;
use common::*;

use txmap::{Env, Options};

#[test]
fn env_lists_named_regions_in_creation_order_with_their_places() {
    let d = ext4_dir("cli-env");
    let dir = d.join("env");
    {
        let env = Env::open(&dir, Options::default()).unwrap();
        env.region("accounts", 5000).unwrap();
        env.region("log", 4096).unwrap();
        // Still open: the second name is in the log, not yet checkpointed.
        let text = succeeds(&txmap(&["env", s(&dir)]));
        assert!(text.contains("2 named regions"), "{text}");
        let a = text.find("accounts: offset 4096, 8192 bytes").expect(&text);
        let l = text.find("log: offset 12288, 4096 bytes").expect(&text);
        assert!(a < l, "creation order: {text}");
        let json = succeeds(&txmap(&["env", "--json", s(&dir)]));
        assert!(
            json.contains(
                "\"regions\":[{\"name\":\"accounts\",\"offset\":4096,\"length\":8192},\
                 {\"name\":\"log\",\"offset\":12288,\"length\":4096}]"
            ),
            "{json}"
        );
    }
    // A directory without one, and a region file that is no environment.
    let none = fails(&txmap(&["env", s(&d.join("none"))]), 2);
    assert!(none.contains("no env.txm"), "{none}");
    let other = d.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let r = txmap::Region::create(&other.join("env.txm"), 8192, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(0, &7u64)).unwrap();
    drop(v);
    drop(r);
    let msg = fails(&txmap(&["env", s(&other)]), 2);
    assert!(msg.contains("not a txmap environment"), "{msg}");
}
