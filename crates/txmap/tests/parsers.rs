//! Fuzzing the parsers of everything read from disk: arbitrary bytes give a
//! typed result, never a panic, and what the encoders write decodes back.
use proptest::prelude::*;
use txmap::wal::format::{self, HEADER_BYTES, LogHeader, Range, RegionHeader};
use txmap::wal::scan;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn header_decoders_accept_any_bytes(page in proptest::collection::vec(any::<u8>(), 4096)) {
        let _ = RegionHeader::decode(&page);
        let _ = LogHeader::decode(&page);
    }

    #[test]
    fn record_decoder_accepts_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600), salt in any::<u64>()) {
        let _ = format::decode_record(&bytes, salt);
    }

    #[test]
    fn scanning_damaged_logs_never_panics(
        n in 0usize..12,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let h = LogHeader { region_id: 7, generation: 3, salt: 99, start_seq: 5 };
        let mut log = vec![0u8; HEADER_BYTES as usize];
        for i in 0..n as u64 {
            let b = vec![i as u8; (i as usize * 37) % 300 + 1];
            format::encode_commit(&mut log, 99, 5 + i, 4 + i, 1 << 20, [Range { offset: i * 100, bytes: &b }].into_iter());
        }
        // Writers leave at least 8 zero bytes after the last record.
        log.extend_from_slice(&[0; 8]);
        let clean = scan::scan(&log, &h);
        prop_assert!(clean.damage.is_none(), "a clean log scans");
        prop_assert_eq!(clean.records.len(), n);
        for (at, v) in flips {
            let i = HEADER_BYTES as usize + at % (log.len() - HEADER_BYTES as usize + 1).max(1);
            if i < log.len() {
                log[i] ^= v;
            }
        }
        log.truncate(HEADER_BYTES as usize + cut % (log.len() - HEADER_BYTES as usize + 1));
        let s = scan::scan(&log, &h);
        // Whatever survives is a prefix, in order, damaged or not.
        for (k, r) in s.records.iter().enumerate() {
            prop_assert_eq!(r.seq, 5 + k as u64);
        }
        let r = scan::read(&log, Some(h), &[0], 7, 4 + cut as u64 % 16);
        for (k, rec) in r.scan.records.iter().enumerate() {
            prop_assert_eq!(rec.seq, r.header.start_seq + k as u64);
        }
    }

    #[test]
    fn headers_round_trip(id in any::<u64>(), generation in 1u64..u64::MAX, a in any::<u64>(), pages in 1u64..(1 << 40), address in any::<u64>()) {
        let mut page = vec![0u8; 4096];
        let rh = RegionHeader { region_id: id, generation, checkpoint_seq: a, data_size: pages * 4096, address };
        let (off, slot) = rh.encode();
        page[off as usize..off as usize + 64].copy_from_slice(&slot);
        prop_assert_eq!(RegionHeader::decode(&page).unwrap(), rh);
        let lh = LogHeader { region_id: id, generation, salt: a, start_seq: pages };
        let (off, slot) = lh.encode();
        let mut page = vec![0u8; 4096];
        page[off as usize..off as usize + 64].copy_from_slice(&slot);
        prop_assert_eq!(LogHeader::decode(&page).unwrap(), lh);
    }
}
