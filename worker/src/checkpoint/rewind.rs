//! A rewind (docs/checkpoints.md): before an Orchestrator's first step, the
//! workspace is put back as one of the session's checkpoints holds it.
//!
//! Nothing is lost: the workspace as it was is checkpointed first, then every
//! file the target does not hold (of those the checkpoints take) is removed
//! and every file it holds written back, then the result is checkpointed as
//! the workspace the Orchestrator starts from. What the checkpoints leave out
//! (ignored files, files over the cap) is not touched. Done again (a worker
//! that took the Orchestrator over before its first step) it finds the
//! workspace as it left it and changes nothing.

use super::{Checkpoints, Kind, nul_separated, text};

impl Checkpoints {
    /// Restores the workspace to `commit`, one of the session's
    /// checkpoints; the line the Orchestrator's first request carries, or
    /// why it could not be done (the workspace then as it was).
    pub(crate) async fn rewind_to(&self, commit: &str) -> Result<String, String> {
        let short: String = commit.chars().take(12).collect();
        let target = self
            .rev(&format!("{commit}^{{commit}}"))
            .await
            .ok_or_else(|| {
                format!("the checkpoint {short} is not in the workspace's repository")
            })?;
        let prefix = format!("refs/arbiter/{}/", self.session);
        let holders = self
            .git(
                &[
                    "for-each-ref",
                    "--contains",
                    &target,
                    "--format=%(refname)",
                    &prefix,
                ],
                &[],
            )
            .await?;
        if text(&holders).is_empty() {
            return Err(format!("{short} is not one of this session's checkpoints"));
        }
        let subject = text(
            &self
                .git(&["log", "-1", "--format=%s", &target], &[])
                .await?,
        );
        // The workspace as it was, kept.
        let before = format!(
            "Before the rewind to {short}: the workspace as it was\n\n{}",
            self.trailers(Kind::BeforeRewind, None)
        );
        self.make(&before).await?;
        let current = self
            .rev(&format!("{}^{{tree}}", self.git_ref))
            .await
            .ok_or("the workspace's last checkpoint cannot be read")?;
        // Files the target does not hold, of those the checkpoints take.
        let added = self
            .git(
                &[
                    "diff-tree",
                    "-r",
                    "-z",
                    "--name-only",
                    "--diff-filter=A",
                    &target,
                    &current,
                ],
                &[],
            )
            .await?;
        for path in nul_separated(&added) {
            let full = self.workspace.join(&path);
            if let Err(e) = tokio::fs::remove_file(&full).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(format!("{path} could not be removed: {e}"));
            }
        }
        // Every file the target holds, written back, through an index of its own.
        let index = self
            .git_dir
            .join(format!("arbiter-rewind-{}.index", uuid::Uuid::now_v7()));
        let with_index = [(
            "GIT_INDEX_FILE".to_owned(),
            index.to_string_lossy().into_owned(),
        )];
        let restored = async {
            self.git(&["read-tree", &target], &with_index).await?;
            self.git(&["checkout-index", "--all", "--force"], &with_index)
                .await
        }
        .await;
        let _ = tokio::fs::remove_file(&index).await;
        restored?;
        let message = format!(
            "Rewound to {short} ({subject}): the workspace as {} starts from it\n\n{}",
            self.name,
            self.trailers(Kind::Start, None)
        );
        self.make(&message).await?;
        Ok(format!(
            "[system] Before you started, the human rewound the workspace to checkpoint {short} \
             ({subject}): its files are as they were then. What was done after it is no longer \
             in the workspace (the checkpoints keep it). Start from the workspace as it is now."
        ))
    }
}
