// swift-tools-version:5.9
// MLXEdgeKit, the Swift side of mlx-edge (see swift/README.md). This manifest is at the
// repository root because SwiftPM reads only the root Package.swift of a git dependency:
// apps add the package by this repository's URL. The sources stay in swift/.
import PackageDescription

let package = Package(
    name: "MLXEdgeKit",
    platforms: [
        .iOS(.v16),
        .macOS(.v13),
    ],
    products: [
        .library(name: "MLXEdgeKit", targets: ["MLXEdgeKit"]),
    ],
    targets: [
        .target(
            name: "MLXEdgeKit",
            path: "swift/Sources/MLXEdgeKit"
        ),
        .testTarget(
            name: "MLXEdgeKitTests",
            dependencies: ["MLXEdgeKit"],
            path: "swift/Tests/MLXEdgeKitTests",
            resources: [.copy("Fixtures")]
        ),
    ]
)
