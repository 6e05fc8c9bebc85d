import Foundation
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Small file-system helpers with crash-safe semantics.
enum AtomicFile {
    /// Writes `data` to a temporary file next to `url`, flushes it, then renames it over
    /// `url` (rename(2) replaces atomically on one volume). A reader sees either the old
    /// or the new file, never a partial one.
    ///
    /// `beforeRename` is a test hook: throwing from it simulates a crash between the
    /// temporary write and the rename.
    static func write(_ data: Data, to url: URL, beforeRename: (() throws -> Void)? = nil) throws {
        let directory = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let temporary = directory.appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString).tmp")
        do {
            try data.write(to: temporary)
            let handle = try FileHandle(forWritingTo: temporary)
            try handle.synchronize()
            try handle.close()
            try beforeRename?()
            try rename(temporary, to: url)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    /// rename(2): atomic on one volume; replaces an existing file (or empty directory).
    static func rename(_ source: URL, to destination: URL) throws {
        let result = source.withUnsafeFileSystemRepresentation { src in
            destination.withUnsafeFileSystemRepresentation { dst -> Int32 in
                guard let src, let dst else { return -1 }
                #if canImport(Darwin)
                return Darwin.rename(src, dst)
                #elseif canImport(Glibc)
                return Glibc.rename(src, dst)
                #else
                return Musl.rename(src, dst)
                #endif
            }
        }
        if result != 0 {
            let code = POSIXErrorCode(rawValue: errno) ?? .EIO
            throw POSIXError(code)
        }
    }

    /// Removes leftover `.<name>.<uuid>.tmp` files of interrupted writes in `directory`.
    static func removeStaleTemporaries(for url: URL) {
        let directory = url.deletingLastPathComponent()
        let prefix = ".\(url.lastPathComponent)."
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else { return }
        for name in names where name.hasPrefix(prefix) && name.hasSuffix(".tmp") {
            try? FileManager.default.removeItem(at: directory.appendingPathComponent(name))
        }
    }
}
