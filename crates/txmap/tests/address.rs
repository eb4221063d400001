//! Fixed region addresses: recorded in the region file, the same in every
//! process and execution, given by the program or chosen at create, and a
//! clear error (never another address) when the range is taken.
mod common;

use common::*;
use txmap::os::mem::{FIXED_HIGH, FIXED_LOW};
use txmap::wal::format::{HEADER_BYTES, RegionHeader, SLOT_OFFSETS};
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;
const MAX: u64 = 64 << 30;

#[test]
fn a_region_gets_a_fixed_address_at_create_and_keeps_it_across_opens() {
    let d = ext4_dir("addr-create");
    let p = d.join("r.txm");
    let r = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let a = r.address().expect("a fixed address");
    assert!((FIXED_LOW..FIXED_HIGH).contains(&a), "{a:#x}");
    assert!(a + MAX as usize <= FIXED_HIGH, "{a:#x}");
    assert_eq!(a % MAX as usize, 0, "aligned to the view size");
    let mut v = r.view_fixed().unwrap();
    assert_eq!(v.base() as usize, a);
    v.run(|v| v.write(8, &1u64)).unwrap();
    drop(v);
    // The view's memory went at close: the address is free again at once.
    let v = r.view_fixed().unwrap();
    assert_eq!(v.base() as usize, a);
    drop(v);
    // Not even kept for this handle's next view: another handle (a new
    // open after a close while a flusher thread still holds the old one)
    // maps there at once.
    let r2 = Region::open(&p, Options::default()).unwrap();
    assert_eq!(r2.view_fixed().unwrap().base() as usize, a);
    drop((r2, r));
    // Checkpoints (at close) rewrite the header: the address stays.
    let r = Region::open(&p, Options::default()).unwrap();
    assert_eq!(r.address(), Some(a));
    let others: Vec<_> = ["q.txm", "s.txm"]
        .iter()
        .map(|n| Region::create(&d.join(n), PAGE, Options::default()).unwrap())
        .collect();
    assert!(
        others.iter().any(|o| o.address() != Some(a)),
        "regions get random addresses"
    );
}

#[test]
fn the_program_gives_the_address() {
    let d = ext4_dir("addr-given");
    let p = d.join("r.txm");
    // Outside the range random addresses come from, so that regions other
    // tests of this process create never hold it.
    let want = 66usize << 40;
    let opts = Options {
        address: Some(want),
        ..Options::default()
    };
    let r = Region::create(&p, 4 * PAGE, opts.clone()).unwrap();
    assert_eq!(r.address(), Some(want));
    assert_eq!(r.view_fixed().unwrap().base() as usize, want);
    // Another handle (as another process would) must agree while it is open.
    let moved = 67usize << 40;
    let e = Region::open(
        &p,
        Options {
            address: Some(moved),
            ..Options::default()
        },
    )
    .err()
    .expect("others have it open at another address");
    assert!(e.to_string().contains("0x420000000000"), "{e}");
    let same = Region::open(&p, opts).unwrap();
    assert_eq!(same.address(), Some(want));
    drop((same, r));
    // Alone with it, the program may move it; the new address is recorded.
    let r = Region::open(
        &p,
        Options {
            address: Some(moved),
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(r.view_fixed().unwrap().base() as usize, moved);
    drop(r);
    assert_eq!(
        Region::open(&p, Options::default()).unwrap().address(),
        Some(moved)
    );
    // Bad addresses are refused with a message.
    for bad in [0usize, want + 1, 0x7fff_0000_0000] {
        let o = Options {
            address: Some(bad),
            ..Options::default()
        };
        let e = Region::create(&d.join(&format!("bad{bad}")), PAGE, o)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("Options::address"), "{e}");
    }
}

#[test]
fn a_taken_address_is_a_clear_error_never_another_address() {
    let d = ext4_dir("addr-taken");
    let p = d.join("r.txm");
    let r = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let a = r.address().unwrap();
    // Something else holds one page in the middle of the range.
    let at = a + (1 << 30);
    // SAFETY: FIXED_NOREPLACE never replaces an existing mapping.
    let m = unsafe {
        libc::mmap(
            at as *mut _,
            PAGE as usize,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(m as usize, at, "the probe mapping landed");
    let e = r.view_fixed().err().expect("the address is taken");
    match &e {
        Error::AddressTaken {
            addr, len, path, ..
        } => {
            assert_eq!((*addr, *len as u64, path.as_path()), (a, MAX, p.as_path()));
        }
        e => panic!("{e}"),
    }
    let text = e.to_string();
    eprintln!("{text}");
    assert!(text.contains(&format!("{a:#x}")), "{text}");
    assert!(
        text.contains(&format!("{at:x}-")),
        "names the holder: {text}"
    );
    assert!(text.contains("r.txm"), "{text}");
    // SAFETY: the probe mapping made above.
    unsafe { libc::munmap(m, PAGE as usize) };
    // A view of this process at the address holds it too, and says so.
    let v = r.view_fixed().unwrap();
    let text = r
        .view_fixed()
        .err()
        .expect("one view per address")
        .to_string();
    assert!(text.contains("txmap view"), "{text}");
    assert_eq!(v.base() as usize, a);
}

#[test]
fn a_region_made_before_addresses_gets_one_and_keeps_it() {
    let d = ext4_dir("addr-old");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    // Rewrite both header slots as an older build wrote them: no address.
    let mut bytes = std::fs::read(&p).unwrap();
    let h = RegionHeader::decode(&bytes[..HEADER_BYTES as usize]).unwrap();
    for g in [h.generation - 1, h.generation] {
        let (off, slot) = RegionHeader {
            generation: g,
            address: 0,
            ..h
        }
        .encode();
        assert_eq!(off as usize, SLOT_OFFSETS[(g % 2) as usize]);
        bytes[off as usize..off as usize + 64].copy_from_slice(&slot);
    }
    std::fs::write(&p, &bytes).unwrap();
    assert_eq!(
        RegionHeader::decode(&bytes[..HEADER_BYTES as usize])
            .unwrap()
            .address,
        0
    );
    let r = Region::open(&p, Options::default()).unwrap();
    let a = r.address().expect("assigned at open");
    assert!((FIXED_LOW..FIXED_HIGH).contains(&a), "{a:#x}");
    drop(r);
    let bytes = std::fs::read(&p).unwrap();
    let h = RegionHeader::decode(&bytes[..HEADER_BYTES as usize]).unwrap();
    assert_eq!(h.address, a as u64, "recorded");
    assert_eq!(
        Region::open(&p, Options::default()).unwrap().address(),
        Some(a)
    );
}

/// A durable region holding raw pointers into itself is reopened by new
/// processes (other address-space layouts) and the pointers are followed.
#[test]
fn raw_pointers_stored_in_a_region_are_valid_in_a_new_process() {
    if let Some(role) = role() {
        assert_eq!(role, "follow");
        let p = std::env::var("TXMAP_ADDR_REGION").unwrap();
        let r = Region::open(std::path::Path::new(&p), Options::default()).unwrap();
        let mut v = r.view_fixed().unwrap();
        v.begin_read().unwrap();
        let head = v.base() as *const *const u64;
        // SAFETY: inside a transaction; the pointer was stored at this
        // very address by another process and points into the region.
        let value = unsafe { **head };
        v.commit().unwrap();
        println!("ADDR {:#x} VALUE {value}", v.base() as usize);
        return;
    }
    let d = ext4_dir("addr-exec");
    let p = d.join("r.txm");
    let r = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let mut v = r.view_fixed().unwrap();
    let base = v.base();
    v.begin().unwrap();
    // SAFETY: inside a transaction, within the region: a list head at
    // offset 0 pointing at a value two pages on.
    unsafe {
        let target = base.add(2 * PAGE as usize) as *mut u64;
        target.write(0xfeed_f00d);
        (base as *mut *mut u64).write(target);
    }
    v.commit().unwrap();
    drop((v, r));
    for _ in 0..2 {
        let out = child(
            "raw_pointers_stored_in_a_region_are_valid_in_a_new_process",
            "follow",
            &[("TXMAP_ADDR_REGION", p.display().to_string())],
        )
        .output()
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = format!("ADDR {:#x} VALUE {}", base as usize, 0xfeed_f00du64);
        assert!(text.contains(&want), "{text}");
    }
}
