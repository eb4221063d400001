//! This process's views of one region and the control of the thread that
//! fences them at checkpoints (issue 20): the registry lives with the
//! region (`RegionInner::fence`); the thread's work on views is
//! `view/fence.rs`, which starts it with `Fence::register`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::os::lock::lock;

/// This process's views of one region and the thread that fences them.
#[derive(Default)]
pub(crate) struct Fence {
    /// Addresses of the live `ViewInner`s (boxed, so they do not move).
    pub(crate) views: Mutex<Vec<usize>>,
    /// The thread's stop flag and handle, while it runs.
    thread: Mutex<Option<(Arc<AtomicBool>, JoinHandle<()>)>>,
    /// The thread runs and can write `/proc/self/mem`: views may hand out
    /// file pages.
    pub(crate) running: AtomicBool,
}

impl Fence {
    /// Registers a view, starting the thread with the first.
    pub(crate) fn register(
        &self,
        region: usize,
        view: usize,
        body: fn(usize, &AtomicBool, &std::fs::File),
    ) {
        lock(&self.views).push(view);
        let mut t = lock(&self.thread);
        if t.is_some() {
            return;
        }
        // Opened first: where forced writes are refused, no view reads the
        // file (a fence it could not answer would hold every checkpoint).
        let Ok(mem) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
        else {
            return;
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        if let Ok(h) = std::thread::Builder::new()
            .name("txmap-fence".into())
            .spawn(move || crate::debug::region_thread(|| body(region, &s, &mem)))
        {
            *t = Some((stop, h));
            self.running.store(true, Ordering::Release);
        }
    }

    /// Removes a view; after this the thread never touches it.
    pub(crate) fn unregister(&self, view: usize) {
        lock(&self.views).retain(|&v| v != view);
    }

    /// True while views may hand out file pages (see `running`).
    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Stops the thread and joins it (`owner`: this is the process that
    /// started it). Joined, not only told to stop: a thread still exiting
    /// when the region's close returns holds the standard library's
    /// thread bookkeeping lock for a moment, and a child forked then
    /// inherits that lock held and hangs in its first thread spawn (its
    /// own region's threads). A forked child has no such thread: it
    /// forgets the handle (joining or detaching a thread of another
    /// process is undefined) and touches nothing.
    pub(crate) fn stop(&self, owner: bool, word: &AtomicU32) {
        let Some((stop, h)) = lock(&self.thread).take() else {
            return;
        };
        if !owner {
            std::mem::forget(h);
            return;
        }
        self.running.store(false, Ordering::Release);
        stop.store(true, Ordering::SeqCst);
        crate::os::lock::futex_wake_all(word);
        let _ = h.join();
    }
}
