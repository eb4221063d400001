//! Locks that live in memory shared between processes and survive the death
//! of their holder: robust process-shared pthread mutexes, and a futex word
//! to wait on for progress.
//!
//! A mutex whose holder died is handed to the next locker with
//! `owner_died = true` (the kernel walks the dead thread's robust list); that
//! locker repairs what the dead holder may have left half done, while it
//! holds the lock. The mutex is marked consistent at once, so if the repairer
//! dies too, the next locker repairs again (repairs are idempotent).

use std::cell::UnsafeCell;
use std::num::NonZeroU32;
use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A robust, process-shared mutex placed in shared memory.
#[repr(C, align(64))]
pub struct SharedMutex {
    m: UnsafeCell<libc::pthread_mutex_t>,
}

// SAFETY: pthread mutexes are made for concurrent use; this one is
// process-shared, so it may be used through any mapping of it.
unsafe impl Sync for SharedMutex {}

/// Held lock; unlocks on drop.
pub struct Guard<'a> {
    mutex: &'a SharedMutex,
    /// The previous holder died holding the lock: its work may be half done.
    pub owner_died: bool,
}

impl SharedMutex {
    /// Initialises the mutex in place.
    ///
    /// # Safety
    /// No other thread or process may use the mutex during this call (the
    /// shared file is being initialised under an exclusive file lock).
    pub unsafe fn init(&self) -> std::io::Result<()> {
        // SAFETY: attr is initialised by pthread_mutexattr_init before use and
        // destroyed after; the mutex memory is ours exclusively (caller).
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            check(libc::pthread_mutexattr_init(&mut attr))?;
            let r = (|| {
                check(libc::pthread_mutexattr_setpshared(
                    &mut attr,
                    libc::PTHREAD_PROCESS_SHARED,
                ))?;
                check(libc::pthread_mutexattr_setrobust(
                    &mut attr,
                    libc::PTHREAD_MUTEX_ROBUST,
                ))?;
                check(libc::pthread_mutex_init(self.m.get(), &attr))
            })();
            libc::pthread_mutexattr_destroy(&mut attr);
            r
        }
    }

    /// Takes the lock, waiting for its holder.
    pub fn lock(&self) -> std::io::Result<Guard<'_>> {
        // SAFETY: the mutex was initialised by `init` before the shared file
        // was published to other openers.
        let r = unsafe { libc::pthread_mutex_lock(self.m.get()) };
        self.finish(r)
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> std::io::Result<Option<Guard<'_>>> {
        // SAFETY: as in `lock`.
        let r = unsafe { libc::pthread_mutex_trylock(self.m.get()) };
        if r == libc::EBUSY {
            return Ok(None);
        }
        self.finish(r).map(Some)
    }

    fn finish(&self, r: i32) -> std::io::Result<Guard<'_>> {
        match r {
            0 => Ok(Guard {
                mutex: self,
                owner_died: false,
            }),
            libc::EOWNERDEAD => {
                // SAFETY: we hold the mutex (EOWNERDEAD means it was acquired).
                check(unsafe { libc::pthread_mutex_consistent(self.m.get()) })?;
                Ok(Guard {
                    mutex: self,
                    owner_died: true,
                })
            }
            e => Err(std::io::Error::from_raw_os_error(e)),
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard holds the mutex.
        unsafe { libc::pthread_mutex_unlock(self.mutex.m.get()) };
    }
}

fn check(r: i32) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(r))
    }
}

/// Sleeps while `word == expected`, at most `timeout` (a waker in another
/// process may have died, so every wait is bounded). Only a wake whose bits
/// meet `bits` ends the sleep (`FUTEX_WAIT_BITSET`), so a waker can pick
/// whom it wakes.
pub fn futex_wait_bits(word: &AtomicU32, expected: u32, timeout: Duration, bits: NonZeroU32) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline.
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let ts = rustix::thread::futex::Timespec {
        tv_sec: now.tv_sec + timeout.as_secs() as i64 + (nanos / 1_000_000_000) as i64,
        tv_nsec: (nanos % 1_000_000_000) as i64,
    };
    let _ = rustix::thread::futex::wait_bitset(
        word,
        rustix::thread::futex::Flags::empty(),
        expected,
        Some(&ts),
        bits,
    );
}

/// Wakes up to `count` waiters on `word` whose bits meet `bits`, in every
/// process.
pub fn futex_wake_bits(word: &AtomicU32, bits: NonZeroU32, count: u32) {
    let _ = rustix::thread::futex::wake_bitset(
        word,
        rustix::thread::futex::Flags::empty(),
        count.min(i32::MAX as u32),
        bits,
    );
}

/// Wakes every waiter on `word`, in every process.
pub fn futex_wake_all(word: &AtomicU32) {
    let _ =
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// Locks a process-local mutex, also when a thread panicked holding it
/// (poisoning is ignored).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
