//! A schedule too large to hold, synthesized into a transfer stream file and checked from
//! that file as it is written.

use super::*;

/// How often (in transfers written) `synthesize_to_stream` reports progress.
pub const STREAM_PROGRESS_EVERY: u64 = 1 << 22;

/// A collective synthesized into a transfer stream file and checked from that file.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamedChecked {
    pub streamed: Streamed,
    pub report: CheckReport,
    /// Wall time from the start until the synthesis had written its last transfer.
    pub synthesized: Duration,
    /// Wall time from the start until the checker had read and checked the whole file.
    pub checked: Duration,
}

/// Synthesizes `collective` as `options` say into a transfer stream file at `path`
/// (`schedule::stream`, recording the network), written as it is made, so no more than
/// the matchings themselves are held (`synth::prepare_streamed`: a copying collective
/// matched as it is written; a combining one's matchings spooled beside `path` first, an
/// All-Reduce's two side by side where its halves are not one matching), and checks the
/// file (`schedule::check_stream`), reading it as it is written on another of the pool's
/// threads where there is one, else after.
/// The file is renamed into place only once it checks. `progress` hears, every
/// [`STREAM_PROGRESS_EVERY`] or so, the transfers spooled plus those written
/// (`synth::spooled_matchings` says how many matchings are spooled first).
pub fn synthesize_to_stream(
    topo: &Topology,
    collective: &Collective,
    options: &SynthOptions,
    path: &Path,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<StreamedChecked> {
    let header = StreamHeader::new(
        topo.name(),
        collective.spec().clone(),
        collective.chunk_bytes(),
        Some(Network::of(topo)),
    );
    let started = Instant::now();
    let shared = std::sync::Mutex::new(progress);
    let tell = |n: u64| {
        if let Ok(mut progress) = shared.lock() {
            progress(n);
        }
    };
    let mut file = fsio::AtomicFile::create(path)?;
    let temp = file.temp_path().to_path_buf();
    let prepared = prepare_streamed(topo, collective, options, path, &tell)?;
    let spooled = prepared.spooled();
    let written = AtomicBool::new(false);
    // A checker that refuses the file stops the synthesis rather than wait for its end.
    let refused = AtomicBool::new(false);
    let (made, checked) = rayon::join(
        || {
            // However the writing ends, so that the checker never waits for bytes that
            // will not come.
            let _finished = fsio::SetOnDrop(&written);
            let out = file.writer();
            let progress = |n| tell(spooled + n);
            let made = write_stream(prepared, &header, out, path, &progress, &refused)
                .and_then(|m| out.flush().map(|()| m).map_err(|e| Error::io(path, e)));
            (made, started.elapsed())
        },
        || {
            let checked = (|| {
                let following = fsio::Following::open(&temp, &written)?;
                let reader = BufReader::with_capacity(1 << 16, following);
                let report = check_stream(
                    StreamReader::new(reader, &path.display().to_string())?,
                    topo,
                )?;
                Ok::<_, Error>((report, started.elapsed()))
            })();
            if checked.is_err() {
                refused.store(true, Ordering::Release);
            }
            checked
        },
    );
    // The checker's verdict first: where it refused, the synthesis only stopped.
    let (report, checked) = checked?;
    let (made, synthesized) = made;
    let streamed = made?;
    if report.transfers as u64 != streamed.transfers {
        return Err(Error::schedule(format!(
            "{}: {} transfers read back where {} were written",
            path.display(),
            report.transfers,
            streamed.transfers
        )));
    }
    file.commit()?;
    Ok(StreamedChecked {
        streamed,
        report,
        synthesized,
        checked,
    })
}

/// How often (in transfers written) the writer looks whether the checker refused the file.
const REFUSAL_EVERY: u64 = 1 << 12;

/// A prepared streamed synthesis written to `out` as a transfer stream; it stops once
/// `refused` is set.
fn write_stream(
    prepared: Prepared<'_>,
    header: &StreamHeader,
    out: &mut (dyn Write + Send),
    path: &Path,
    progress: &(dyn Fn(u64) + Sync),
    refused: &AtomicBool,
) -> Result<Streamed> {
    let io = |e| Error::io(path, e);
    let mut stream = StreamWriter::new(out, header).map_err(io)?;
    let mut count = 0u64;
    let streamed = prepared.emit(&mut |t| {
        stream.push(&t).map_err(io)?;
        count += 1;
        if count % REFUSAL_EVERY == 0 && refused.load(Ordering::Acquire) {
            return Err(Error::Synthesis(
                "stopped: the checker refused what was written".into(),
            ));
        }
        if count % STREAM_PROGRESS_EVERY == 0 {
            progress(count);
        }
        Ok(())
    })?;
    stream.finish().map_err(io)?;
    Ok(streamed)
}
