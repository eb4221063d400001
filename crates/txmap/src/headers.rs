//! Reading a region's two header pages: the region header checked against
//! its log's (the same region, a whole number of pages, a file long
//! enough). Used by recovery, the handle's open and join, the group rules
//! and plain files, below all of them.

use crate::error::{Error, Result};
use crate::io::Storage;
use crate::os::mem::PAGE;
use crate::wal::format::{HEADER_BYTES, HeaderError, LogHeader, RegionHeader};

/// Reads the region and log headers and reports both, without writing.
pub(crate) fn read_headers(
    data: &dyn Storage,
    log: &dyn Storage,
) -> Result<(RegionHeader, LogHeader)> {
    let (header, page) = read_headers_raw(data, log)?;
    let lh = LogHeader::decode(&page).map_err(|e| Error::corrupt(log.path(), 0, e.to_string()))?;
    Ok((header, lh))
}

/// The region header, checked against the log's, and the log's header page.
/// Both log slots damaged is left to the caller (recovery may see the epoch
/// in the records); any other unreadable log header is an error.
pub(crate) fn read_headers_raw(
    data: &dyn Storage,
    log: &dyn Storage,
) -> Result<(RegionHeader, Vec<u8>)> {
    let mut page = vec![0u8; HEADER_BYTES as usize];
    let dl = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
    if dl < HEADER_BYTES {
        return Err(Error::corrupt(
            data.path(),
            dl,
            "file shorter than its header page",
        ));
    }
    data.read_at(&mut page, 0)
        .map_err(|e| Error::io("read header of", data.path(), e))?;
    let header =
        RegionHeader::decode(&page).map_err(|e| Error::corrupt(data.path(), 0, e.to_string()))?;
    let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
    if ll < HEADER_BYTES {
        return Err(Error::corrupt(
            log.path(),
            ll,
            "log shorter than its header page",
        ));
    }
    log.read_at(&mut page, 0)
        .map_err(|e| Error::io("read header of", log.path(), e))?;
    match LogHeader::decode(&page) {
        Ok(lh) if lh.region_id != header.region_id => {
            return Err(Error::corrupt(
                log.path(),
                0,
                format!(
                    "log belongs to region {:016x}, not to {} ({:016x})",
                    lh.region_id,
                    data.path().display(),
                    header.region_id
                ),
            ));
        }
        Ok(_) | Err(HeaderError::BadChecksum) => {}
        Err(e) => return Err(Error::corrupt(log.path(), 0, e.to_string())),
    }
    if header.data_size == 0 || !header.data_size.is_multiple_of(PAGE as u64) {
        return Err(Error::corrupt(
            data.path(),
            0,
            format!(
                "header claims a data size of {} bytes, not a whole number of pages",
                header.data_size
            ),
        ));
    }
    if dl < HEADER_BYTES.saturating_add(header.data_size) {
        return Err(Error::corrupt(
            data.path(),
            dl,
            format!(
                "region file truncated: {} bytes of data expected",
                header.data_size
            ),
        ));
    }
    Ok((header, page))
}
