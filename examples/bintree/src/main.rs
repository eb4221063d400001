//! Demo of the binary tree example: `cargo run --release -p
//! txmap-example-bintree -- [REGION]` inserts keys in one transaction,
//! removes some in another that aborts (its removals are compensated), and
//! prints the tree as a fresh transaction sees it.

use std::path::PathBuf;

use txmap::{Error, Options, Region};
use txmap_example_bintree::{Tree, register};

fn main() -> Result<(), Error> {
    // Before opening: recovery may replay the operations or run undos.
    register()?;
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("bintree-demo.txm"));
    let r = if path.exists() {
        Region::open(&path, Options::default())?
    } else {
        Region::create(&path, 16 * 4096, Options::default())?
    };
    let mut v = r.view()?;
    let tree = Tree::at(0);
    v.run(|v| {
        if v.read::<u64>(0)? == 0 {
            Tree::create(v, 0, v.len() as u64)?;
        }
        Ok(())
    })?;
    // Each insert commits at once as a nested top action.
    v.run(|v| {
        for k in [50, 20, 80, 10, 30, 70, 90] {
            tree.insert(v, k)?;
        }
        Ok(())
    })?;
    // This transaction aborts: its removals are undone by inserts.
    let r2 = v.run(|v| {
        tree.remove(v, 20)?;
        tree.remove(v, 80)?;
        v.abort()
    });
    assert!(matches!(r2, Err(Error::Aborted)));
    v.begin_read()?;
    let keys = tree.check(&v)?;
    v.commit()?;
    println!("{}: {keys:?}", path.display());
    Ok(())
}
