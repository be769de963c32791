package synclib.checkpoint;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Abortable;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.PathIOException;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * Spark's streaming checkpoint on an object store (S3A), each entry written in place by one PUT.
 *
 * <p>An entry Spark must not overwrite (an offset or commit log entry) is created with S3's
 * put-if-absent ({@code If-None-Match: *}, Hadoop's {@code fs.option.create.conditional.overwrite}):
 * the store itself refuses a second writer of a batch id, which Spark then reports as a concurrent
 * update of its log. Nothing is probed before the PUT (S3A's create checks are off:
 * {@code fs.s3a.create.performance}), and an entry Spark cancels is aborted: it never appears.
 * Compared with Spark's {@code AbortableStreamBasedCheckpointFileManager}, which creates through
 * Hadoop's FileContext (a probe of the parent and two of the entry, each a HEAD and a LIST, before
 * the PUT), a new entry costs one request instead of seven, and the guarantee is the store's.
 */
public final class PutIfAbsentCheckpointFileManager implements CheckpointFileManager {

  /** Hadoop's create option for put-if-absent (Options.CreateFileOptionKeys, Hadoop 3.4.2+). */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  private final Path root;
  private final FileSystem fs;

  public PutIfAbsentCheckpointFileManager(Path path, Configuration hadoopConf) throws IOException {
    this.root = path;
    this.fs = path.getFileSystem(hadoopConf);
    if (!fs.hasPathCapability(path, CommonPathCapabilities.ABORTABLE_STREAM)) {
      throw new UnsupportedOperationException(
          fs.getScheme() + ": output streams cannot be aborted, which " + getClass().getSimpleName()
              + " needs at " + path + " (it is meant for S3A)");
    }
  }

  /** A Hadoop call that may fail with an IOException. */
  @FunctionalInterface
  private interface HadoopCall<T> {
    T run() throws IOException;
  }

  /** {@code call}'s result; its IOException rethrown unchecked, naming {@code what} (Spark's interface
   * declares none). */
  private static <T> T unchecked(String what, HadoopCall<T> call) {
    try {
      return call.run();
    } catch (IOException e) {
      throw new RuntimeException(what + " failed: " + e, e);
    }
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    FSDataOutputStream out = unchecked("creating checkpoint entry " + path,
        () -> (FSDataOutputStream) fs.createFile(path)
            .overwrite(overwriteIfPossible)
            .recursive()
            .opt(CONDITIONAL_CREATE, !overwriteIfPossible)
            .build());
    return new Entry(out, path, overwriteIfPossible);
  }

  @Override
  public FSDataInputStream open(Path path) {
    return unchecked("opening checkpoint entry " + path, () -> fs.open(path));
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return unchecked("listing " + path, () -> {
      try {
        return fs.listStatus(path, filter);
      } catch (FileNotFoundException e) {
        return new FileStatus[0];
      }
    });
  }

  @Override
  public void mkdirs(Path path) {
    unchecked("creating directory " + path, () -> fs.mkdirs(path, FsPermission.getDirDefault()));
  }

  @Override
  public boolean exists(Path path) {
    return unchecked("probing " + path, () -> fs.exists(path));
  }

  @Override
  public void delete(Path path) {
    unchecked("deleting " + path, () -> {
      try {
        return fs.delete(path, true);
      } catch (FileNotFoundException e) {
        return false;  // already gone: what a delete wants
      }
    });
  }

  @Override
  public boolean isLocal() {
    return fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem;
  }

  @Override
  public Path createCheckpointDirectory() {
    Path qualified = fs.makeQualified(root);
    mkdirs(qualified);
    return qualified;
  }

  /** An entry's stream: visible whole when closed, never when cancelled. */
  private static final class Entry extends CancellableFSDataOutputStream {
    private final FSDataOutputStream out;
    private final Path path;
    private final boolean overwriteIfPossible;
    private boolean done;

    Entry(FSDataOutputStream out, Path path, boolean overwriteIfPossible) {
      super(out);
      this.out = out;
      this.path = path;
      this.overwriteIfPossible = overwriteIfPossible;
    }

    @Override
    public synchronized void close() throws IOException {
      if (done) {
        return;
      }
      done = true;
      try {
        out.close();
      } catch (PathIOException e) {
        if (overwriteIfPossible) {
          throw e;
        }
        // The store refused the PUT: another writer created the entry first (412).
        FileAlreadyExistsException exists = new FileAlreadyExistsException(
            path + " was created by another writer (put-if-absent refused): " + e.getMessage());
        exists.initCause(e);
        throw exists;
      }
    }

    @Override
    public synchronized void cancel() {
      if (done) {
        return;
      }
      done = true;
      OutputStream wrapped = out.getWrappedStream();
      if (wrapped instanceof Abortable) {
        ((Abortable) wrapped).abort();
      }
    }
  }
}
