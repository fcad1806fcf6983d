//! Gzip that spends the CPU only where it pays: the archive's bytes are deflated at the fastest level, and a stretch
//! that does not shrink (photos, video, archives: most of what buckets hold) is stored instead.
//!
//! Deflating incompressible data at the default level ran at about 32 MB/s on a 2-core machine, which made a 5 GB
//! bucket's download take 156 s where reading its objects took 30 s; at the fastest level it is still about 70 MB/s,
//! while storing runs at memory speed. So every [`PROBE`] bytes are deflated at [`Compression::fast`] and judged:
//! output above [`WORTH_IT`] of the input switches the stream to stored blocks for the next [`STORED_RUN`] bytes,
//! after which it probes again, so text that follows photos is compressed again.
//!
//! The result is one gzip member, which every gzip reader reads. Its deflate data is a run of raw deflate streams,
//! one per stretch: each but the last ends with a sync flush (non-final blocks, byte-aligned), and the next starts
//! with no history, so no block refers back past a switch. A fresh compressor per stretch rather than
//! `Compress::set_level`, which fails for want of output room when the stream has not just been flushed into it.
//! The gzip header and trailer around the deflate data (RFC 1952: ten fixed bytes; the CRC-32 and the length) are
//! written here, the CRC by [`flate2::Crc`].

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// Bytes deflated at the fastest level before judging whether deflating pays.
const PROBE: u64 = 1 << 20;

/// Bytes stored, once deflating did not pay, before probing again.
const STORED_RUN: u64 = 16 << 20;

/// The share of its input a probe's output may reach for deflating to still count as paying.
const WORTH_IT: f64 = 0.97;

/// Output room made before each call into the compressor.
const ROOM: usize = 64 * 1024;

/// A gzip member's header: magic, deflate, no flags, no time, no extra flags, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// A gzip stream written a chunk at a time.
pub struct AdaptiveGzip {
    /// The current stretch's raw deflate stream.
    stretch: Compress,
    storing: bool,
    crc: Crc,
    started: bool,
}

impl Default for AdaptiveGzip {
    fn default() -> Self {
        Self {
            stretch: Compress::new(Compression::fast(), false),
            storing: false,
            crc: Crc::new(),
            started: false,
        }
    }
}

impl AdaptiveGzip {
    /// Compresses `input`, appending what the stream has ready to `out`.
    pub fn write(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        self.start(out);
        self.crc.update(input);
        while !input.is_empty() {
            out.reserve(ROOM);
            let before = self.stretch.total_in();
            self.stretch
                .compress_vec(input, out, FlushCompress::None)
                .map_err(std::io::Error::other)?;
            let taken = usize::try_from(self.stretch.total_in() - before).unwrap_or(usize::MAX);
            input = &input[taken.min(input.len())..];
        }
        self.adapt(out)
    }

    /// Ends the stream (the last block and the gzip trailer) into `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        self.start(out);
        self.drain(out, FlushCompress::Finish)?;
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Ok(())
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            out.extend_from_slice(&HEADER);
            self.started = true;
        }
    }

    /// At the end of a probe or a stored run, starts the next stretch at the level it calls for.
    fn adapt(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let fed = self.stretch.total_in();
        let storing = if self.storing {
            // A stored run ends after STORED_RUN bytes: probe again.
            if fed < STORED_RUN {
                return Ok(());
            }
            false
        } else {
            if fed < PROBE {
                return Ok(());
            }
            let made = self.stretch.total_out();
            // Lossless for these sizes: both are far below 2^52.
            #[allow(clippy::cast_precision_loss)]
            let pays = (made as f64) <= (fed as f64) * WORTH_IT;
            // Deflating that pays goes on, in stretches of STORED_RUN bytes so that the judgement stays recent.
            if pays && fed < STORED_RUN {
                return Ok(());
            }
            !pays
        };
        // The stretch ends on a byte boundary with nothing held back, and the next starts with no history.
        self.drain(out, FlushCompress::Sync)?;
        let level = if storing {
            Compression::none()
        } else {
            Compression::fast()
        };
        self.stretch = Compress::new(level, false);
        self.storing = storing;
        Ok(())
    }

    /// Writes out everything the stretch holds: with [`FlushCompress::Sync`] ending on a byte boundary, with
    /// [`FlushCompress::Finish`] ending the deflate data.
    fn drain(&mut self, out: &mut Vec<u8>, flush: FlushCompress) -> std::io::Result<()> {
        loop {
            out.reserve(ROOM);
            let status = self
                .stretch
                .compress_vec(&[], out, flush)
                .map_err(std::io::Error::other)?;
            // Done once the stream ended, or a call had room to spare: everything held was written.
            if status == Status::StreamEnd
                || (flush != FlushCompress::Finish && out.len() < out.capacity())
            {
                return Ok(());
            }
        }
    }

    /// Whether the stream is storing rather than deflating (for the tests).
    #[cfg(test)]
    fn is_storing(&self) -> bool {
        self.storing
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// Bytes no compressor shrinks (xorshift, so the test needs no generator crate).
    fn noise(len: usize, mut seed: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            out.extend_from_slice(&seed.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    fn text(len: usize) -> Vec<u8> {
        b"{\"id\": 17, \"name\": \"a row of a log that repeats itself\"}\n"
            .iter()
            .copied()
            .cycle()
            .take(len)
            .collect()
    }

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn noise_is_stored_text_is_deflated_and_the_stream_reads_back_whole() {
        let mut gz = AdaptiveGzip::default();
        let mut out = Vec::new();
        let mut input = Vec::new();
        // Text first: it is deflated.
        let part = text(3 << 20);
        for chunk in part.chunks(64 * 1024) {
            gz.write(chunk, &mut out).unwrap();
        }
        assert!(!gz.is_storing());
        assert!(out.len() < part.len() / 20, "text shrinks: {}", out.len());
        input.extend_from_slice(&part);
        // Noise: after one probe the stream stores it.
        let part = noise(40 << 20, 7);
        for chunk in part.chunks(64 * 1024) {
            gz.write(chunk, &mut out).unwrap();
        }
        input.extend_from_slice(&part);
        assert!(gz.is_storing(), "noise is stored");
        // Text again: once the stored run ends, a probe finds it pays again.
        let before = out.len();
        let part = text(24 << 20);
        for chunk in part.chunks(64 * 1024) {
            gz.write(chunk, &mut out).unwrap();
        }
        input.extend_from_slice(&part);
        assert!(!gz.is_storing(), "text after noise is deflated again");
        assert!(out.len() - before < part.len(), "and shrinks");
        gz.finish(&mut out).unwrap();
        assert_eq!(gunzip(&out), input);
        // Noise grew by at most the stored blocks' headers and the probes' overhead.
        assert!(out.len() < input.len(), "{} of {}", out.len(), input.len());
    }

    #[test]
    fn an_empty_stream_is_a_valid_gzip() {
        let mut gz = AdaptiveGzip::default();
        let mut out = Vec::new();
        gz.finish(&mut out).unwrap();
        assert_eq!(gunzip(&out), b"");
    }

    #[test]
    fn chunks_of_any_size_read_back() {
        let input = [noise(3 << 20, 3), text(5 << 20), noise(1, 9)].concat();
        for size in [7usize, 4096, 300_000, 8 << 20] {
            let mut gz = AdaptiveGzip::default();
            let mut out = Vec::new();
            for chunk in input.chunks(size) {
                gz.write(chunk, &mut out).unwrap();
            }
            gz.finish(&mut out).unwrap();
            assert_eq!(gunzip(&out), input, "in chunks of {size}");
        }
    }
}
